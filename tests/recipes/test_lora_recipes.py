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
])
def test_bad_lora_settings_are_one_line_before_the_run_directory_exists(tmp_path, lora, message):
    result = run_cli(lora_config(tmp_path, **lora), tmp_path / "run")
    assert result.returncode != 0
    assert not (tmp_path / "run").exists()
    last = result.stderr.strip().splitlines()[-1]
    assert re.search(message, last), last
