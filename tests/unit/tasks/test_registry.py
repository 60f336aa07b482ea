"""The one registry of the built-in tasks (tasks/registry.py): every built-in model's tokenizer ships
and loads, builtin:bug_injection (SSR's name before) names the SSR warm start as builtin:ssr does, the tiny model's shape,
the prompt sets, and the proposer–solver tasks it registers."""

import fnmatch
import tomllib
from pathlib import Path

import pytest

from nash_jax.models.hf_config import config_from_hf
from nash_jax.models.tokenizer import load_tokenizer
from nash_jax.selfplay import answer_sources
from nash_jax.tasks import registry

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", sorted({m.name for m in registry.MODELS.values()}))
def test_each_builtin_model_has_a_shipped_tokenizer_in_package_data(name):
    model = registry.get(name)
    assert model.name == name and load_tokenizer(model.tokenizer_dir) is not None
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["nash_jax.tasks"]
    for f in model.tokenizer_dir.iterdir():
        relative = f.relative_to(Path(registry.__file__).parent).as_posix()
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in package_data), relative


def test_builtin_ssr_is_the_bug_injection_warm_start(tmp_path):
    ssr, bug = registry.get("builtin:ssr"), registry.get("builtin:bug_injection")
    assert ssr is bug and ssr.name == "builtin:ssr"
    assert registry.initial_dir("builtin:ssr", tmp_path) == tmp_path / "init" / "policy"
    assert registry.get("some/dir") is None and registry.initial_dir("some/dir", tmp_path) is None


def test_tiny_llama_values_make_a_llama_of_four_heads_over_two_kv_heads():
    llama = config_from_hf(registry.tiny_llama_values(300, 64, 3))
    assert (llama.vocab_size, llama.hidden_size, llama.intermediate_size, llama.num_layers,
            llama.num_heads, llama.num_kv_heads, llama.head_dim) == (300, 64, 128, 3, 4, 2, 16)


@pytest.mark.parametrize("name", sorted(registry.BUILTIN_PROMPTS))
def test_each_builtin_prompt_set_draws_its_prompts_by_seed(name):
    first = registry.builtin_prompt_texts(f"{name}:5", seed=1)
    assert len(first) == 5 and first == registry.builtin_prompt_texts(f"{name}:5", seed=1)


@pytest.mark.parametrize("name", sorted(registry.PROPOSER_SOLVER_TASKS))
def test_each_proposer_solver_task_is_registered_under_its_own_name(name):
    assert answer_sources.task_class(name).name == name
