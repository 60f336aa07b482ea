"""The `ssr:` config section (repositories, groups, the seven checks' thresholds, the
sandbox's limits, the anchors, the update), the checks between its fields, and the stage names."""

from dataclasses import dataclass, field
from typing import Literal

from nash_jax.config import AT_LEAST_1, NON_NEGATIVE, POSITIVE, PROBABILITY, Range
from nash_jax.sandbox.sandbox import SandboxLimits, require
from nash_jax.tasks.code.ssr_checks import CheckSettings
from nash_jax.tasks.code import generated_repos


STAGE = "ssr"
DATA_STAGE = "ssr_data"  # the warm start's demonstrations and the held-out bugs
ANCHOR_STAGE = "ssr_anchors"


@dataclass(frozen=True)
class SandboxConfig:
    """sandbox.sandbox.SandboxLimits of every test run (a run that hits one is invalid), and the
    isolation the run requires: "required" stops before any policy code runs where the machine cannot
    make the sandbox's namespaces; "best_effort" runs without them and the report names what was off."""
    DOMAINS = {"wall_s": POSITIVE, "cpu_s": AT_LEAST_1, "memory_mb": AT_LEAST_1,
               "output_kb": AT_LEAST_1, "processes": AT_LEAST_1}
    wall_s: float = 30.0
    cpu_s: int = 4  # the corpus's suites take about half a CPU second; a loop stops here
    memory_mb: int = 2048
    output_kb: int = 1024
    processes: int = 64
    isolation: Literal["required", "best_effort"] = "required"

    def limits(self):
        return SandboxLimits(wall_s=self.wall_s, cpu_s=self.cpu_s, memory_bytes=self.memory_mb << 20,
                             output_bytes=self.output_kb << 10, processes=self.processes,
                             isolation=self.isolation)


@dataclass(frozen=True)
class GeneratedConfig:
    """Repositories of the procedural family (tasks.code.generated_repos), written under the run
    directory and added to the training and held-out repositories (its held-out split never shares a
    function with its training one)."""
    DOMAINS = {"train": NON_NEGATIVE, "heldout": NON_NEGATIVE, "functions": AT_LEAST_1,
               "max_constant": Range(generated_repos.MAX_CONSTANT)}
    train: int = 0
    heldout: int = 0
    functions: int = 3  # one-line functions per repository
    # constants 2..max_constant: above 9, most training functions are new to the model as well, so
    # that a repair of one, too, has to copy the constant from the function's name
    max_constant: int = generated_repos.MAX_CONSTANT
    # "descriptive": a function's name says what it computes (add_3), so a repair can copy the
    # constant from it; "opaque": a word (kilo), so a repair has to be read off the test's asserts
    names: Literal["descriptive", "opaque"] = "descriptive"


@dataclass(frozen=True)
class AnchorConfig:
    DOMAINS = {"eval_every": AT_LEAST_1, "heldout_bugs": AT_LEAST_1, "repositories": AT_LEAST_1,
               "injectors_per_repository": AT_LEAST_1}
    eval_every: int = 10  # steps between anchor evaluations (and one at step 0 and at the end)
    heldout_bugs: int = 8  # mutation-engine bugs of the held-out repositories (never trained on)
    repositories: int = 4  # training repositories the anchor injectors write for
    injectors_per_repository: int = 2


@dataclass(frozen=True)
class SSRConfig:
    DOMAINS = {"steps": AT_LEAST_1, "repositories_per_step": AT_LEAST_1,
               "injectors_per_repository": AT_LEAST_1, "solvers_per_artifact": AT_LEAST_1,
               "min_passing": AT_LEAST_1, "min_changed_files": AT_LEAST_1, "min_failing": AT_LEAST_1,
               "ssr_alpha": PROBABILITY, "demonstrations": AT_LEAST_1,
               "demonstration_repositories": AT_LEAST_1, "kl_coef": NON_NEGATIVE,
               "injector_max_tokens": AT_LEAST_1, "solver_max_tokens": AT_LEAST_1,
               "clip_low": Range(0, 1), "clip_high": NON_NEGATIVE, "snapshots": AT_LEAST_1}
    steps: int = 20
    # training repositories: null = the shipped `train` split; or names, paths and glob patterns
    # (tasks.code.code_repositories.expand); the held-out ones are the shipped `heldout` split
    repositories: list[str] | None = None
    heldout_repositories: list[str] | None = None
    generated: GeneratedConfig = field(default_factory=GeneratedConfig)
    repositories_per_step: int = 2
    injectors_per_repository: int = 2  # an injector's comparison group: the artifacts of one repository
    solvers_per_artifact: int = 4  # G
    min_passing: int = 1
    min_changed_files: int = 1
    min_failing: int = 1
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    ssr_alpha: float = 0.8
    higher_order: bool = False  # a failed repair becomes a new bug (order ≤ 2): not built yet
    demonstrations: int = 32  # mutation-engine artifacts the warm start imitates (both roles)
    # the warm start's demonstrations come from the first N training repositories only (in the order
    # `repositories` lists them, the generated ones after; null: all); self-play trains on every one
    demonstration_repositories: int | None = None
    kl_coef: float = 0.0
    injector_advantage: Literal["grpo", "drgrpo", "rloo"] = "rloo"
    solver_advantage: Literal["grpo", "drgrpo", "rloo"] = "grpo"
    injector_max_tokens: int = 640
    solver_max_tokens: int = 160
    clip_low: float = 0.2
    clip_high: float = 0.28
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                         "drgrpo"] = "seq-mean-token-mean"
    snapshots: int = 1  # policies exported over training (RUN_DIR/iter_k/policy); steps must divide
    anchors: AnchorConfig = field(default_factory=AnchorConfig)

    def check_settings(self):
        return CheckSettings(min_passing=self.min_passing, min_changed_files=self.min_changed_files,
                             min_failing=self.min_failing, limits=self.sandbox.limits())


def rows_per_step(b):
    """The learner batch: every injector of a step and G solvers for each, a fixed size."""
    return b.repositories_per_step * b.injectors_per_repository * (1 + b.solvers_per_artifact)


def check(config):
    b = config.ssr
    if b.higher_order:
        raise ValueError("ssr.higher_order=true: higher-order bugs (a failed repair as a new "
                         "bug) are not built yet; expected false")
    if b.steps % b.snapshots:
        raise ValueError(f"ssr.steps={b.steps} is not a multiple of "
                         f"ssr.snapshots={b.snapshots}")
    b.sandbox.limits()
    # before anything is written: where the namespaces are missing, stop (required) or say so once
    line = require(b.sandbox.isolation, opt_out="ssr.sandbox.isolation=best_effort")
    if line is not None:
        print(line)
