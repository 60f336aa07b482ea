"""sampling.engine: vllm without vLLM: the refusals (recipes that cannot use it, a missing vllm, a
stray vllm_python), the worker protocol's digests, seeds and finished batches, and the real worker
script exiting with its one-line error in an interpreter that has no vllm (the parity and recipe tests
that need vLLM itself are test_vllm_parity.py and tests/recipes/test_vllm_sppo.py)."""

import json
import sys

import jax
import pytest

from nash_jax import engine
from nash_jax.config import SamplingConfig, load_config
from nash_jax.rollout import engines, vllm_engine, vllm_worker
from tests.recipes.conftest import CONFIGS, small_config


def request(tmp_path, **sampling):
    (tmp_path / "policy").mkdir(exist_ok=True)
    batches = [{"index": 0, "seeds": vllm_engine.prompt_seeds(jax.random.key(3), 2),
                "prompts": [[1, 2, 3], [4, 5]]}]
    return vllm_engine.request_of(tmp_path / "policy", batches, num_samples=2,
                                  sampling=SamplingConfig(**sampling), max_new_tokens=8, eos_ids=[2],
                                  dtype="float32", engine_seed=0, max_prompt_len=3)


def test_the_request_digest_names_every_setting_the_samples_depend_on(tmp_path):
    base = request(tmp_path)["digest"]
    assert request(tmp_path)["digest"] == base
    for change in ({"temperature": 0.5}, {"top_p": 0.9}, {"top_k": 5}):
        assert request(tmp_path, **change)["digest"] != base, change
    (tmp_path / "policy" / "model.safetensors").write_bytes(b"re-exported")
    assert request(tmp_path)["digest"] != base


def test_prompt_seeds_come_from_the_batch_key_and_differ_between_prompts():
    seeds = vllm_engine.prompt_seeds(jax.random.key(7), 4)
    assert seeds == vllm_engine.prompt_seeds(jax.random.key(7), 4)
    assert len(set(seeds)) == 4 and all(0 <= s < 2**31 for s in seeds)
    assert seeds != vllm_engine.prompt_seeds(jax.random.key(8), 4)


def test_only_finished_batches_of_the_same_request_are_kept(tmp_path):
    """A resumed stage keeps batch files of its own request and redoes anything else."""
    made = request(tmp_path)
    vllm_worker.write_json_atomically(str(tmp_path / "batch_000000.json"),
                                      {"digest": made["digest"], "index": 0, "tokens": []})
    vllm_worker.write_json_atomically(str(tmp_path / "batch_000001.json"),
                                      {"digest": "another", "index": 1, "tokens": []})
    (tmp_path / "batch_000002.json").write_text("{not json")
    assert set(vllm_engine.finished_batches(tmp_path, made["digest"])) == {0}


def test_the_worker_in_an_interpreter_without_vllm_exits_with_one_line_naming_the_extra(tmp_path):
    """The real worker script, run by this test's interpreter (which has no vllm)."""
    if vllm_engine.missing_vllm(None) is None:
        pytest.skip("this interpreter has vllm")
    made = request(tmp_path)
    with pytest.raises(ValueError, match=r"needs the vllm package.*pip install 'nash-jax\[vllm\]'"):
        vllm_engine.run_worker(made, tmp_path / "work", None)
    assert json.loads((tmp_path / "work" / "request.json").read_text())["digest"] == made["digest"]


def test_a_missing_interpreter_is_named():
    reason = vllm_engine.missing_vllm("/nonexistent/python")
    assert "sampling.vllm_python='/nonexistent/python' cannot be run" in reason


def test_sppo_with_vllm_missing_is_refused_before_anything_starts(tmp_path):
    if vllm_engine.missing_vllm(sys.executable) is None:
        pytest.skip("this interpreter has vllm")
    config = load_config(small_config(tmp_path, sampling={"engine": "vllm"}),
                         [f"run_dir={tmp_path / 'run'}"])
    with pytest.raises(ValueError, match=r"sampling.engine=vllm needs the vllm package, and this "
                                         r"interpreter .* has none: pip install 'nash-jax\[vllm\]'"):
        engine.run(config)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("recipe, reason", [
    ("nash_md", r"recipe nash_md cannot use it: its opponent samples the token-wise geometric mixture"),
    ("grpo", r"recipe grpo cannot use it: .*weight sync to vLLM is not built"),
    ("proposer_solver", r"recipe proposer_solver cannot use it: .*weight sync to vLLM is not built"),
    ("game_selfplay", r"recipe game_selfplay cannot use it: .*weight sync to vLLM is not built"),
    ("ssr", r"recipe ssr cannot use it: .*weight sync to vLLM is not built"),
])
def test_recipes_whose_policy_changes_every_step_refuse_vllm_by_name(recipe, reason):
    path = CONFIGS / (f"{recipe}_demo.yaml" if recipe != "game_selfplay" else "kuhn_demo.yaml")
    with pytest.raises(ValueError, match=r"sampling.engine='vllm': " + reason):
        load_config(path, ["sampling.engine=vllm"])


def test_vllm_python_without_the_vllm_engine_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"sampling.vllm_python='/x/python': nothing reads it with "
                                         r"sampling.engine=nash_jax"):
        load_config(small_config(tmp_path), ["sampling.vllm_python=/x/python"])


def test_the_nash_jax_engine_needs_no_vllm():
    engines.check_engine(SamplingConfig())  # nothing probed, nothing raised
