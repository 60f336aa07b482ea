"""Online Nash-MD-PG: resumption after SIGKILL, the opponent mixture's end points, its report."""

import json
import signal

import jax
import numpy as np
import pytest
from flax import nnx

from nash_jax import engine
from nash_jax.config import load_config
from nash_jax.models.llama import Llama, LlamaConfig
from nash_jax.runs import read_metrics
from nash_jax.rollout.sampling import generate, mixture_generate
from tests.recipes.conftest import CONFIGS, assert_same_parameters, run_cli, small_config

pytestmark = pytest.mark.long


def test_nash_md_run_killed_mid_training_resumes_to_identical_parameters(tmp_path):
    config_path = small_config(tmp_path, base="nash_md_demo", name="nmd",
                               train={"checkpoint_every": 3}, nash_md={"refresh_every": 4})
    reference = engine.run(load_config(config_path, [f"run_dir={tmp_path / 'whole'}"]))
    killed = tmp_path / "killed"
    result = run_cli(config_path, killed, "nash_md:step=5")  # after the step-3 checkpoint, past a refresh
    assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
    assert not (killed / "iter_1" / "policy").exists() and (killed / "iter_0" / "policy").is_dir()
    result = run_cli(config_path, killed)
    assert result.returncode == 0, result.stderr[-2000:]
    for k in range(2):
        assert_same_parameters(killed / f"iter_{k}" / "policy", tmp_path / "whole" / f"iter_{k}" / "policy")

    report = json.loads((tmp_path / "whole" / "report.json").read_text())
    assert report == reference | {"run_dir": report["run_dir"]}
    assert report["iterates"] == ["pi_0", "pi_1", "pi_2"] and len(report["win_rate_table"]) == 3
    assert all("exploitability" in p for p in report["per_iterate"])
    exploit = [m for m in read_metrics(tmp_path / "whole" / "metrics.jsonl") if "exploitability" in m]
    assert [m["step"] for m in exploit] == [0, 4, 8]
    steps = [m for m in read_metrics(tmp_path / "whole" / "metrics.jsonl") if m["stage"] == "nash_md"]
    assert [m["step"] for m in steps] == list(range(1, 9))
    assert all(0.0 <= m["pref_mean"] <= 1.0 and m["skipped"] == 0 for m in steps)


def test_opponent_is_the_policy_at_beta_0_and_the_reference_at_beta_1():
    config = LlamaConfig(vocab_size=24, hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2,
                         num_kv_heads=1, head_dim=8)
    policy, reference = Llama(config, rngs=nnx.Rngs(0)), Llama(config, rngs=nnx.Rngs(1))
    prompts = [[3, 4, 5], [6, 7, 8, 9]]
    key = jax.random.PRNGKey(7)
    kwargs = dict(num_samples=4, max_new_tokens=6, key=key)
    for beta, alone in ((0.0, policy), (1.0, reference)):
        mixed = mixture_generate(policy, reference, beta, prompts, **kwargs)
        single = generate(alone, prompts, **kwargs)
        np.testing.assert_array_equal(mixed.tokens, single.tokens)
        np.testing.assert_allclose(mixed.logprobs_mixture, single.logprobs_raw, atol=1e-5)
    other = generate(policy, prompts, **kwargs)
    assert not np.array_equal(mixture_generate(policy, reference, 1.0, prompts, **kwargs).tokens,
                              other.tokens)


def test_the_nash_md_demo_lowers_exploitability_under_the_oracle(tmp_path):
    """configs/nash_md_demo.yaml as shipped, on one CPU device as `nash-jax run` runs it: exact
    exploitability falls from the warm start's."""
    result = run_cli(CONFIGS / "nash_md_demo.yaml", tmp_path / "run", one_device=True)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    trace = [m["exploitability"] for m in read_metrics(tmp_path / "run" / "metrics.jsonl")
             if "exploitability" in m]
    print(f"exploitability every 5 steps: {np.round(trace, 4).tolist()}")
    assert len(trace) == 13 and trace[-1] < 0.75 * trace[0]
    assert min(trace[1:]) < trace[0] and report["per_iterate"][-1]["exploitability"] < trace[0]
    assert report["final_vs_initial"] > 0.5
