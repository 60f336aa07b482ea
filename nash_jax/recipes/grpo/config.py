"""The `grpo:` config section, the checks a run passes before anything starts (a judge that gives
scalar rewards, snapshots that divide the steps), and the names of the stages a run records."""

from dataclasses import dataclass
from typing import Literal

from nash_jax import judges
from nash_jax.config import AT_LEAST_1, NON_NEGATIVE, Range

STAGE = "grpo"


@dataclass(frozen=True)
class GRPOConfig:
    RENAMED = {"epochs_per_batch": "train.epochs"}  # pg updates on each step's samples
    DOMAINS = {"steps": AT_LEAST_1, "prompts_per_step": AT_LEAST_1, "samples_per_prompt": Range(2),
               "clip_low": Range(0, 1), "clip_high": NON_NEGATIVE,
               "kl_coef": NON_NEGATIVE, "snapshots": AT_LEAST_1}
    steps: int = 100
    prompts_per_step: int = 16
    samples_per_prompt: int = 4  # K: one comparison group of K samples per prompt
    # A_i within a prompt's group: grpo (r − mean) / (std + eps), rloo (leave-one-out mean), drgrpo (r − mean)
    advantage: Literal["grpo", "rloo", "drgrpo"] = "grpo"
    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = 0.0  # k3 KL weight towards π_0 (logged at every value, 0 included)
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                         "drgrpo"] = "token-mean"
    snapshots: int = 2  # policies exported as RUN_DIR/iter_k/policy, evenly spaced; steps must divide


def check(config):
    g = config.grpo
    if not judges.gives_rewards(config.judge):
        kind = config.judge.kind + (f" with judge.returns={config.judge.returns}"
                                    if config.judge.kind == "python" else "")
        raise ValueError(f"judge.kind={kind} gives only preferences; recipe grpo trains on a scalar "
                         "reward r(x, y): expected judge.kind=reward_model (a Hugging Face "
                         "*ForSequenceClassification directory in judge.path) or judge.kind=python with "
                         "judge.returns=rewards")
    if g.steps % g.snapshots:
        raise ValueError(f"grpo.steps={g.steps} is not a multiple of grpo.snapshots={g.snapshots}")
