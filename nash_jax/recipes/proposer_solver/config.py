"""The `proposer_solver:` config section (the task, the anchors, the round and its update), the checks
between its fields, and the names of the stages a run records."""

from dataclasses import dataclass, field
from typing import Callable, Literal

from nash_jax.config import AT_LEAST_1, NON_NEGATIVE, POSITIVE, PROBABILITY, Range
from nash_jax.selfplay import answer_sources
from nash_jax.tasks.documents import documents


STAGE = "proposer_solver"
ANCHOR_STAGE = "proposer_solver_anchors"  # metrics.jsonl records keep one (stage, step) each


@dataclass(frozen=True)
class Schedule:
    """Which role trains when (the section's `schedule`)."""

    phases: Callable  # (step, phase_steps) -> (the proposer trains, the solver trains)
    frozen_solver: bool  # the proposer's phase plays against the solver frozen at the phase's start
    band: bool  # the solver trains only on the problems whose p̂ lies in `band`


SCHEDULES = {
    "joint": Schedule(lambda step, phase_steps: (True, True), frozen_solver=False, band=False),
    # R-Zero's: phases of phase_steps steps, the proposer's first, then the solver's
    "alternating": Schedule(lambda step, phase_steps: ((step // phase_steps) % 2 == 0,
                                                       (step // phase_steps) % 2 == 1),
                            frozen_solver=True, band=True),
}


@dataclass(frozen=True)
class TaskConfig:
    DOMAINS = {"seeds": AT_LEAST_1, "corpus_seed": NON_NEGATIVE, "heldout_documents": AT_LEAST_1,
               "teacher_off_by_one": PROBABILITY}
    name: str = "arithmetic"  # arithmetic, document or arithmetic_chat (answer_sources.TASKS)
    seeds: int = 64  # arithmetic: seed problems the proposer writes from
    corpus: str = "builtin"  # document: a jsonl/parquet file with a `text` column, or the generated one
    corpus_seed: int = 0
    heldout_documents: int = 8  # document: documents kept from the proposer; the held-out questions
    # arithmetic: share of the warm start's solver demonstrations that answer one more than the truth
    # (a sloppy teacher: π_0 then knows roughly where each answer lies, and only an exact verifier can
    # teach it the rest)
    teacher_off_by_one: float = 0.0


@dataclass(frozen=True)
class AnchorConfig:
    DOMAINS = {"eval_every": AT_LEAST_1, "heldout_problems": AT_LEAST_1, "sources": AT_LEAST_1,
               "proposals_per_source": AT_LEAST_1, "snapshots": AT_LEAST_1, "archive_size": AT_LEAST_1}
    eval_every: int = 10  # steps between anchor evaluations (and one at step 0 and at the end)
    heldout_problems: int = 64  # arithmetic: the fixed held-out problem set
    sources: int = 16  # fixed anchor sources proposed from at each evaluation
    proposals_per_source: int = 2
    snapshots: int = 2  # solver snapshots over training for the co-adaptation table; steps must divide
    archive_size: int = 512  # earlier anchor proposals kept for novelty


@dataclass(frozen=True)
class ProposerSolverConfig:
    DOMAINS = {"steps": AT_LEAST_1, "sources_per_step": AT_LEAST_1, "proposals_per_source": Range(2),
               "solvers_per_problem": AT_LEAST_1, "spice_var": POSITIVE, "ssr_alpha": PROBABILITY,
               "repetition_threshold": PROBABILITY, "kl_coef": NON_NEGATIVE, "phase_steps": AT_LEAST_1,
               "proposer_max_tokens": AT_LEAST_1, "solver_max_tokens": AT_LEAST_1,
               "clip_low": Range(0, 1), "clip_high": NON_NEGATIVE}
    steps: int = 60
    task: TaskConfig = field(default_factory=TaskConfig)
    answer_source: Literal["verifier", "document", "majority"] = "verifier"
    sources_per_step: int = 4
    proposals_per_source: int = 4  # a proposer's comparison group: the proposals from one source
    solvers_per_problem: int = 4  # M
    proposer_reward: Literal["learnability", "tent", "spice_variance", "ssr"] = "learnability"
    invalid_value: float = -1.0  # the proposer's reward for an invalid proposal
    spice_var: float = 0.01
    ssr_alpha: float = 0.8
    repetition_threshold: float = 0.5  # BLEU distance at which proposals share a cluster
    # subtract R-Zero's repetition share |C_k|/B from proposer rewards: null = under majority vote only
    repetition_penalty: bool | None = None
    kl_coef: float = 0.0  # > 0: the pg_kl objective, a k3 KL penalty towards the initial policy π_0
    proposer_advantage: Literal["grpo", "drgrpo", "rloo"] = "rloo"
    solver_advantage: Literal["grpo", "drgrpo", "rloo"] = "grpo"
    schedule: Literal["joint", "alternating"] = "joint"
    phase_steps: int = 10  # alternating: steps per phase (proposer, then solver)
    band: list[float] = field(default_factory=lambda: [0.25, 0.75])  # alternating: p̂ kept for solvers
    proposer_max_tokens: int = 12
    solver_max_tokens: int = 4
    # a solver reply cut at solver_max_tokens: "wrong" scores it as a reply with no answer (reward 0, a
    # failure in the solve rate p̂, trained on like any other); "drop" leaves its whole episode out of
    # the step, the proposer's rollout with it
    cut_solver_replies: Literal["wrong", "drop"] = "wrong"
    clip_low: float = 0.2
    clip_high: float = 0.28
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                         "drgrpo"] = "seq-mean-token-mean"
    anchors: AnchorConfig = field(default_factory=AnchorConfig)


def rows_per_step(ps):
    """The learner batch: every rollout of a step (proposals and their solvers), a fixed size."""
    return ps.sources_per_step * ps.proposals_per_source * (1 + ps.solvers_per_problem)


def check(config):
    ps = config.proposer_solver
    answer_sources.answer_source(ps.answer_source, ps.task.name)
    if ps.task.name == "document" and ps.task.corpus != "builtin":
        documents.check_corpus_file(ps.task.corpus)  # before the run directory is touched
    if ps.steps % ps.anchors.snapshots:
        raise ValueError(f"proposer_solver.steps={ps.steps} is not a multiple of "
                         f"proposer_solver.anchors.snapshots={ps.anchors.snapshots}")
    lo, hi = (ps.band + [None, None])[:2]
    if len(ps.band) != 2 or not 0.0 <= lo <= hi <= 1.0:
        raise ValueError(f"proposer_solver.band={ps.band}; expected [lo, hi] with 0 ≤ lo ≤ hi ≤ 1")
