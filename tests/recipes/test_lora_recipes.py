"""Recipes with `model.lora`: adapters trained over a frozen base, exported as PEFT adapter directories
and merged policies; a run killed anywhere resumes to the same adapters; bad input refused up front."""

import ast
import json
import re
import signal

import numpy as np
import peft
import pytest
import torch
import yaml
import transformers
from safetensors.numpy import load_file

from nash_jax import engine
from nash_jax.config import load_config
from nash_jax.runs import RunDir, read_metrics
from tests.recipes.conftest import assert_same_parameters, run_cli, small_config

pytestmark = pytest.mark.long

LORA = {"rank": 4, "alpha": 8.0}
FAST = {"optimizer": {"name": "adamw", "learning_rate": 1e-3}}


def lora_config(tmp, **lora):
    return small_config(tmp, name="lora", model={"lora": {**LORA, **lora}}, train=FAST)


@pytest.fixture(scope="module")
def sppo_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sppo_lora")
    path = lora_config(tmp)
    report = engine.run(load_config(path, [f"run_dir={tmp / 'run'}"]))
    return path, tmp / "run", report


def adapter_tensors(run_dir, t):
    return load_file(run_dir / f"iter_{t}" / "adapter" / "adapter_model.safetensors")


def test_sppo_trains_adapters_only_and_exports_each_iterate_both_ways(sppo_run):
    _, run_dir, report = sppo_run
    run = RunDir(run_dir)
    assert all(run.done(f"iter_{t}/train") for t in range(2)) and report["iterates"][-1] == "pi_2"
    tensors = adapter_tensors(run_dir, 1)
    assert all(".lora_A." in k or ".lora_B." in k for k in tensors) and len(tensors) == 2 * 7 * 2
    assert max(float(np.abs(v).max()) for k, v in tensors.items() if "lora_B" in k) > 0, "B moved"
    # the checkpoints hold the adapters and their optimiser state, not the base
    metadata = json.loads((run_dir / "iter_1" / "checkpoints" / "8" / "state" / "_METADATA").read_text())
    arrays = [ast.literal_eval(key) for key in metadata["tree_metadata"]]  # orbax's tuple keys
    params = [key for key in arrays if key[0] == "params"]
    assert params and all(key[3].endswith(("_lora_a", "_lora_b")) for key in params), params
    assert all(any(str(k).endswith(("_lora_a", "_lora_b")) for k in key)
               for key in arrays if key[0] == "opt_state" and "layers" in key), "moments of adapters only"
    steps = [m for m in read_metrics(run_dir / "metrics.jsonl") if m["stage"] == "iter_1"]
    # π_1 (the anchor of iteration 1) is the base with iteration 0's adapters: the policy it trains
    # starts there, so the first step's log-ratios are zero
    assert abs(steps[0]["log_ratio_max"]) < 1e-4 and abs(steps[0]["log_ratio_min"]) < 1e-4


def test_exported_adapter_over_the_base_in_peft_equals_the_merged_iterate(sppo_run):
    _, run_dir, _ = sppo_run
    base_dir = run_dir / "init" / "policy"
    base = transformers.AutoModelForCausalLM.from_pretrained(base_dir).eval()
    adapted = peft.PeftModel.from_pretrained(base, run_dir / "iter_1" / "adapter").eval()
    merged = transformers.AutoModelForCausalLM.from_pretrained(run_dir / "iter_1" / "policy").eval()
    tokens = torch.as_tensor(np.random.default_rng(0).integers(3, 20, (2, 9)))
    with torch.no_grad():
        diff = float((adapted(tokens).logits - merged(tokens).logits).abs().max())
    print(f"PEFT adapter over the base against the merged export: {diff:.2e}")
    assert diff < 1e-4


def test_sppo_over_an_nf4_base_samples_and_trains_the_same_quantised_policy(tmp_path):
    """The sampler's log π_0(y) (the anchor) and the train step's agree on the nf4 base: the first
    step's log-ratios are 0; the iterate exports as a PEFT adapter and merged fp weights."""
    path = lora_config(tmp_path, base="nf4", merged_from_quantised=True)
    engine.run(load_config(path, [f"run_dir={tmp_path / 'run'}", "sppo.iterations=1"]))
    first = next(m for m in read_metrics(tmp_path / "run" / "metrics.jsonl") if m["stage"] == "iter_0")
    assert abs(first["log_ratio_max"]) < 1e-4 and abs(first["log_ratio_min"]) < 1e-4, first
    assert (tmp_path / "run" / "iter_0" / "adapter" / "adapter_model.safetensors").is_file()
    merged = load_file(tmp_path / "run" / "iter_0" / "policy" / "model.safetensors")
    assert all(v.dtype == np.float32 for v in merged.values())


def test_an_imported_peft_adapter_is_pi_0(sppo_run, tmp_path):
    """model.lora.adapter: π_0 is the base with that adapter (exported merged as RUN_DIR/initial/policy,
    the iterate the report calls pi_0), and iteration 0 trains from it."""
    config_path, reference_dir, _ = sppo_run
    run_dir = tmp_path / "imported"
    adapter = reference_dir / "iter_0" / "adapter"
    report = engine.run(load_config(config_path, [f"run_dir={run_dir}", f"model.lora.adapter={adapter}",
                                                  "sppo.iterations=1"]))
    assert report["iterates"] == ["pi_0", "pi_1"]
    assert_same_parameters(run_dir / "initial" / "policy", reference_dir / "iter_0" / "policy", atol=1e-6)
    first = next(m for m in read_metrics(run_dir / "metrics.jsonl") if m["stage"] == "iter_0")
    assert abs(first["log_ratio_max"]) < 1e-4 and abs(first["log_ratio_min"]) < 1e-4


def test_sppo_lora_killed_in_training_resumes_to_the_same_adapters(sppo_run, tmp_path):
    config_path, reference_dir, _ = sppo_run
    run_dir = tmp_path / "killed"
    for crash_at in ("iter_0:step=6", "iter_1:step=3"):
        result = run_cli(config_path, run_dir, crash_at)
        assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
    result = run_cli(config_path, run_dir)
    assert result.returncode == 0, result.stderr[-2000:]
    for t in range(2):
        ours, theirs = adapter_tensors(run_dir, t), adapter_tensors(reference_dir, t)
        assert sorted(ours) == sorted(theirs)
        for key in ours:
            assert np.array_equal(ours[key], theirs[key]), key
        assert_same_parameters(run_dir / f"iter_{t}" / "policy", reference_dir / f"iter_{t}" / "policy")


@pytest.mark.parametrize("lora, message", [
    ({"rank": 0}, r"model\.lora\.rank=0; expected a value ≥ 1"),
    ({"alpha": 0}, r"model\.lora\.alpha=0(\.0)?; expected a value > 0"),
    ({"targets": ["qkv_proj"]}, r"model\.lora\.targets=\['qkv_proj'\]; expected distinct names"),
    ({"adapter": "/nonexistent"}, r"model\.lora\.adapter='/nonexistent': expected a PEFT adapter"),
    ({"base": "nf4"}, r"model\.lora\.base=nf4: every recipe exports its iterates as merged fp weights"),
    ({"dropout": 0.1}, r"model\.lora\.dropout=0\.1; only 0 is supported"),
    ({"merged_from_quantised": True}, r"model\.lora\.merged_from_quantised=true: model\.lora\.base is none"),
])
def test_bad_lora_settings_are_one_line_before_the_run_directory_exists(tmp_path, lora, message):
    result = run_cli(lora_config(tmp_path, **lora), tmp_path / "run")
    assert result.returncode != 0
    assert not (tmp_path / "run").exists()
    last = result.stderr.strip().splitlines()[-1]
    assert re.search(message, last), last


def test_nash_md_lora_killed_mid_training_resumes_to_the_same_adapters(tmp_path):
    """The online learner with adapters: μ (refreshed to π_θ every 4 steps) and π_0 are adapters over
    the one base; a SIGKILL after a checkpoint and past a refresh resumes to the same adapters."""
    config_path = small_config(tmp_path, base="nash_md_demo", name="nmd_lora", model={"lora": LORA},
                               train={"checkpoint_every": 3, **FAST}, nash_md={"refresh_every": 4})
    report = engine.run(load_config(config_path, [f"run_dir={tmp_path / 'whole'}"]))
    killed = tmp_path / "killed"
    result = run_cli(config_path, killed, "nash_md:step=5")
    assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
    result = run_cli(config_path, killed)
    assert result.returncode == 0, result.stderr[-2000:]
    for k in range(2):
        ours = load_file(killed / f"iter_{k}" / "adapter" / "adapter_model.safetensors")
        theirs = load_file(tmp_path / "whole" / f"iter_{k}" / "adapter" / "adapter_model.safetensors")
        assert sorted(ours) == sorted(theirs) and all(np.array_equal(ours[k], theirs[k]) for k in ours)
        assert_same_parameters(killed / f"iter_{k}" / "policy", tmp_path / "whole" / f"iter_{k}" / "policy")
    assert max(float(np.abs(v).max()) for k, v in theirs.items() if "lora_B" in k) > 0, "B moved"
    assert report["iterates"] == ["pi_0", "pi_1", "pi_2"]


def _with_lora(path):
    values = yaml.safe_load(path.read_text())
    values.setdefault("model", {})["lora"] = LORA
    values.setdefault("train", {})["optimizer"] = FAST["optimizer"]
    path.write_text(yaml.safe_dump(values))
    return path


def _proposer_solver(tmp):
    from tests.recipes.test_proposer_solver_recipe import tiny_config
    return tiny_config(tmp, name="ps_lora")


def _game_selfplay(tmp):
    from tests.recipes.test_game_selfplay_recipe import tiny_config
    return tiny_config(tmp, name="gsp_lora")


@pytest.mark.parametrize("make_config", [_proposer_solver, _game_selfplay],
                         ids=["proposer_solver", "game_selfplay"])
def test_self_play_recipes_train_adapters_over_the_base(make_config, tmp_path):
    """Each snapshot exports its adapters; B moves exactly when some update had a gradient (the tiny
    proposer–solver run's advantages are all 0: B = 0 gives an exactly zero gradient, where the full
    fine-tune's KL term reads round-off between two programs' log-probs)."""
    run_dir = tmp_path / "run"
    engine.run(load_config(_with_lora(make_config(tmp_path)), [f"run_dir={run_dir}"]))
    adapters = sorted(run_dir.glob("iter_*/adapter/adapter_model.safetensors"))
    assert len(adapters) == 2, "each snapshot exports its adapters"
    moved = max(float(np.abs(v).max()) for k, v in load_file(adapters[-1]).items() if "lora_B" in k)
    stage = make_config.__name__.lstrip("_")
    updates = [m for m in read_metrics(run_dir / "metrics.jsonl") if m["stage"] == stage
               and "grad_norm" in m]
    learned = any(m["zero_gradient"] == 0 and m["skipped"] == 0 for m in updates)
    print(f"{stage}: max |B| = {moved:.3g}; updates with a gradient: "
          f"{sum(m['zero_gradient'] == 0 for m in updates)} of {len(updates)}")
    assert (moved > 0) == learned
    if stage == "game_selfplay":
        assert learned
