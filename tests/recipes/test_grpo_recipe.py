"""Online GRPO on a scalar reward: one small run with a tiny random HF reward model as the judge, killed
mid-training and resumed, against the same run uninterrupted; its rewards against transformers, its
advantages against hand-computed ones, its metrics and report; preference-only judges refused."""

import json
import signal
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

from nash_jax import engine, runs
from nash_jax.cli import main
from nash_jax.config import load_config
from nash_jax.recipes import grpo
from tests.unit.judges.tiny_decoders import tiny_judge_dir  # noqa: F401  (the fixture)
from tests.recipes.conftest import CONFIGS, assert_same_parameters, run_cli, small_config

pytestmark = pytest.mark.long

K = 4
# two pg steps on each step's rollouts: the second is off-policy, which the clipped ratio must see
SMALL_GRPO = {"steps": 6, "prompts_per_step": 4, "samples_per_prompt": K, "snapshots": 2}


@pytest.fixture(scope="module")
def small_runs(tmp_path_factory, tiny_judge_dir):  # noqa: F811  (the fixture imported above)
    """The config, the run uninterrupted (`whole`), the run killed (SIGKILL, through the CLI) after step
    4 and resumed (`killed`), their reports, the reward model and its tokenizer."""
    tmp = tmp_path_factory.mktemp("grpo")
    model_dir, model, tokenizer = tiny_judge_dir("reward_model")
    path = small_config(tmp, base="grpo_demo", name="grpo_small", grpo=SMALL_GRPO,
                        train={"checkpoint_every": 3, "epochs": 2})
    values = yaml.safe_load(path.read_text())
    values["judge"] = {"kind": "reward_model", "path": str(model_dir), "batch_size": 16}
    path.write_text(yaml.safe_dump(values))
    whole, killed = tmp / "whole", tmp / "killed"
    report = engine.run(load_config(path, [f"run_dir={whole}"]))
    result = run_cli(path, killed, "grpo:step=4")  # after the step-3 checkpoint and the first snapshot
    assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
    assert (killed / "iter_0" / "policy").is_dir() and not (killed / "iter_1" / "policy").exists()
    resumed = engine.run(load_config(path, [f"run_dir={killed}"]))  # in this process: no start-up
    return SimpleNamespace(config=path, whole=whole, killed=killed, report=report, resumed=resumed,
                           model=model, tokenizer=tokenizer)


def test_a_killed_run_resumes_to_the_uninterrupted_parameters_rollouts_and_report(small_runs):
    whole, killed, resumed = small_runs.whole, small_runs.killed, small_runs.resumed
    for k in range(2):
        assert_same_parameters(killed / f"iter_{k}" / "policy", whole / f"iter_{k}" / "policy")
    for step in (4, 6):
        name = f"grpo/rollouts/step_{step}.parquet"
        assert runs.read_table(killed / name) == runs.read_table(whole / name)
    assert resumed == small_runs.report | {key: resumed[key] for key in ("run_dir", "iterate_dirs")}
    assert _step_metrics(killed) == _step_metrics(whole)


def _step_metrics(run_dir):
    return [{k: v for k, v in m.items() if k != "step_s"} for m in runs.read_metrics(run_dir / "metrics.jsonl")
            if m["stage"] == "grpo"]


def reward_model_scores(model, tokenizer, prompts, responses):
    """r from transformers' LlamaForSequenceClassification on the chat-templated (user, assistant)
    texts, one at a time (no padding)."""
    out = []
    for prompt, response in zip(prompts, responses):
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt},
                                              {"role": "assistant", "content": response}], tokenize=False)
        batch = tokenizer(text, add_special_tokens=False, return_tensors="pt")
        with torch.no_grad():
            out.append(float(model(**batch).logits[0, 0]))
    return np.array(out)


def test_the_rewards_are_the_hf_reward_models_and_the_batch_carries_group_advantages(small_runs):
    whole, model, tokenizer = small_runs.whole, small_runs.model, small_runs.tokenizer
    rollouts = runs.read_table(whole / "grpo" / "rollouts" / "step_1.parquet")
    rewards = np.array(rollouts["reward"])
    assert len(rewards) == SMALL_GRPO["prompts_per_step"] * K
    np.testing.assert_allclose(rewards, reward_model_scores(model, tokenizer, rollouts["prompt"],
                                                            rollouts["response"]), atol=1e-4)
    groups = rewards.reshape(-1, K)
    assert all(len(set(p)) == 1 for p in np.array(rollouts["prompt"]).reshape(-1, K))  # prompt-major
    assert (groups.std(axis=1) > 0).any()
    by_hand = (groups - groups.mean(1, keepdims=True)) / (groups.std(1, ddof=1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(np.array(rollouts["advantage"]).reshape(-1, K), by_hand, atol=1e-5)


def test_each_step_logs_its_reward_spread_length_kl_and_clip_fraction(small_runs):
    whole = small_runs.whole
    steps = [m for m in runs.read_metrics(whole / "metrics.jsonl") if m["stage"] == "grpo"]
    assert [m["step"] for m in steps] == list(range(1, 7))
    for m in steps:
        rollouts = runs.read_table(whole / "grpo" / "rollouts" / f"step_{m['step']}.parquet")
        groups = np.array(rollouts["reward"]).reshape(-1, K)
        assert m["reward_mean"] == pytest.approx(groups.mean(), abs=1e-6)
        assert m["reward_std"] == pytest.approx(groups.std(), abs=1e-6)
        assert m["degenerate_share"] == pytest.approx(np.mean(groups.max(1) == groups.min(1)))
        assert m["length_mean"] == pytest.approx(np.mean(rollouts["length"]))
        assert m["kl"] >= 0.0 and 0.0 <= m["clip_fraction"] <= 1.0 and m["skipped"] == 0
    # the metrics are the last epoch's: one update away from the samples' policy, so the ratio moves
    assert all(abs(m["ratio_mean"] - 1.0) > 1e-5 for m in steps), [m["ratio_mean"] for m in steps]
    assert all(m["kl"] > 0.0 for m in steps)


def test_the_report_adds_the_held_out_reward_of_every_iterate(small_runs):
    whole, report = small_runs.whole, small_runs.report
    assert report["iterates"] == ["pi_0", "pi_1", "pi_2"] and report["judge"] == "reward_model"
    assert [p["heldout_reward"] for p in report["per_iterate"]] == report["heldout_reward"]
    samples = runs.read_table(whole / "eval" / "samples_0.parquet")
    prompts = json.loads((whole / "report.json").read_text())["eval_prompts"]
    assert len(samples["responses"]) == prompts
    flat = [(p, r) for p, rs in zip(_eval_prompts(whole, prompts), samples["responses"]) for r in rs]
    expected = reward_model_scores(small_runs.model, small_runs.tokenizer, *zip(*flat)).mean()
    assert report["heldout_reward"][0] == pytest.approx(expected, abs=1e-4)
    lines = engine.summary_lines(load_config(small_runs.config), report)
    assert lines[0].startswith("held-out reward (8 prompts × 2 samples at the sampling settings): pi_0 ")
    assert " -> pi_2 " in lines[0]


def _eval_prompts(run_dir, n):
    """The held-out prompt texts of a run, in the order the report samples them (none was dropped)."""
    from nash_jax.engine import prompt_sets
    from nash_jax.runs import RunDir

    config = load_config(run_dir / "config.yaml")
    splits = prompt_sets.prompt_splits(config.data, RunDir(run_dir), eval_prompts=config.eval.prompts,
                                      seed=config.seed)
    assert len(splits.eval) == n
    return splits.eval


@pytest.mark.parametrize("mode, scale", [("grpo", 1 / np.sqrt(14 / 3)), ("drgrpo", 1.0), ("rloo", 4 / 3)])
def test_group_credit_by_hand_in_each_mode(mode, scale):
    """Two prompts × K = 4: rewards 1, 2, 3, 6 (mean 3, sample std √(14/3)) and four equal rewards."""
    advantages, degenerate = grpo.group_credit(np.array([1, 2, 3, 6, 5, 5, 5, 5.0]), 4, mode)
    expected = np.array([-2, -1, 0, 3, 0, 0, 0, 0.0]) * scale
    np.testing.assert_allclose(advantages, expected, rtol=1e-5, atol=1e-6)
    assert degenerate == 0.5


@pytest.mark.parametrize("judge", [{"kind": "synthetic"},
                                   {"kind": "python", "function": "nash_jax.tasks.synthetic.synthetic:SyntheticOracle",
                                    "returns": "preferences"}])
def test_a_judge_that_gives_only_preferences_is_refused_before_anything_runs(tmp_path, capsys, judge):
    values = yaml.safe_load((CONFIGS / "grpo_demo.yaml").read_text())
    values["judge"] = judge
    path = tmp_path / "pref.yaml"
    path.write_text(yaml.safe_dump(values))
    assert main(["run", str(path), f"run_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert f"judge.kind={judge['kind']}" in err and "gives only preferences" in err
    assert "expected judge.kind=reward_model" in err and "judge.returns=rewards" in err
    assert not (tmp_path / "run").exists()
