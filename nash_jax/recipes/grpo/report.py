"""The report: the shared cross-iterate report (win rates under the reward model's Bradley-Terry
preferences, lengths, KL to π_0) with each iterate's mean reward on the held-out prompts, per-snapshot
training curves, and the lines `nash-jax run` prints."""

import numpy as np

from nash_jax import reporting
from nash_jax.engine import policy_files
from nash_jax.engine import iterates_report
from nash_jax.judges.user_code import UserCodeError
from nash_jax.recipes.grpo.config import STAGE
from nash_jax.runs.metrics import read_metrics

HELDOUT_REWARD = "heldout_reward"


def iterates(config, run):
    return [("pi_0", policy_files.initial_policy_dir(config.model.path, run))] + [
        (f"pi_{k + 1}", run / f"iter_{k}" / "policy") for k in range(config.grpo.snapshots)]


def write_report(config, run, eval_prompts, tokenizer, reward, mesh):
    return iterates_report.evaluate_and_write(
        config, run, iterates=iterates(config, run), eval_prompts=eval_prompts, tokenizer=tokenizer,
        judge=reward, mesh=mesh, iterations=segment_summaries(config, run),
        response_metrics=lambda prompts, responses: heldout_reward(reward, prompts, responses))


def heldout_reward(reward, prompts, responses):
    """{heldout_reward: the mean reward of every held-out sample (responses [B][M] to prompts [B])}."""
    flat_prompts = [p for p, rs in zip(prompts, responses) for _ in rs]
    try:
        scores = reward.rewards(flat_prompts, [r for rs in responses for r in rs])
    except ValueError as err:
        raise ValueError(f"scoring the held-out samples: {err}") from None
    except UserCodeError as err:
        raise err.located("scoring the held-out samples")
    return {HELDOUT_REWARD: float(np.mean(scores))}


def segment_summaries(config, run):
    """Per exported snapshot: the loss and mean training reward of the steps that led to it."""
    metrics = read_metrics(run / "metrics.jsonl")
    per = config.grpo.steps // config.grpo.snapshots
    out = []
    for k in range(config.grpo.snapshots):
        rewards = [m["reward_mean"] for m in metrics
                   if m["stage"] == STAGE and k * per < m["step"] <= (k + 1) * per]
        out.append({"iteration": k, **iterates_report.loss_curve(metrics, STAGE, k * per, (k + 1) * per),
                    "reward_mean": float(np.mean(rewards)) if rewards else None})
    return out


def summary(run_report):
    """The held-out reward of every iterate, π_0 first, then the shared report's lines."""
    values = run_report[HELDOUT_REWARD]
    line = " -> ".join(f"{label} {v:.3f}" for label, v in zip(run_report["iterates"], values))
    return [f"held-out reward ({run_report['eval_prompts']} prompts × "
            f"{run_report['samples_per_prompt']} samples at the sampling settings): {line}",
            *reporting.summary_lines(run_report)]
