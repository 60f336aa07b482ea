"""Self-play SWE-RL (SSR; Wei et al., arXiv 2512.18552): one policy injects bugs into sandboxed Python
repositories and repairs them, with executed tests as the only judge.

Each step, on `repositories_per_step` training repositories:

    inject    the policy writes `injectors_per_repository` artifacts per repository (its files as the
              prompt): a bug patch, a test-weakening patch and the oracle test files
              (tasks.code.ssr_artifact's text form)
    validate  the seven checks (tasks.code.ssr_checks) in the sandbox; a text that does not parse, or is
              cut off, is invalid too, and so is one whose test run hits a sandbox limit
    repair    G = `solvers_per_artifact` solvers see each valid artifact's buggy repository with the
              weakening applied and the reversed weakening patch as the specification, and write a
              repair patch
    grade     the oracle test files are reset and run: solver reward 1 when every one passes, else 0
    reward    injector: core.advantages.ssr_injector_reward over its solvers' solve rate (−1 when
              invalid, −α when s ∈ {0, 1}, else 1 − (1 + α) s)
    advantage comparison groups: solvers within their artifact, injectors within their repository
    update    one clipped policy-gradient step (`pg`, or `pg_kl` with kl_coef) on both roles' rows,
              through the shared online layer (engine/learner.py: its loop, checkpoints, resumption)

pytest's own JUnit report stands in for the paper's injector-written test script and parser.

Anchors, every `anchors.eval_every` steps (step 0 is the warm start) and at the end: the greedy repair
rate on a fixed set of held-out bugs in the held-out repositories (made by the mutation engine, never
trained on), and on fresh artifacts for fixed anchor repositories the valid-artifact rate, the count of
each first failed check, the solve-rate distribution and the diversity of the injected edits; every
valid anchor artifact is saved under RUN_DIR/anchor_artifacts for `nash-jax ssr-validate`.

Crash points: `ssr:validate:step=N` (after the sandbox's verdicts of step N),
`ssr:solve:step=N` and `ssr:step=N` (after its update).

The modules, by concern: config, task (repositories, demonstrations, held-out bugs), game (injecting,
validating, repairing, grading with one policy), rounds, credit, anchors, initial_policy (the warm
start), training and report.
"""

from nash_jax.engine import Recipe, register
from nash_jax.engine.registry import ONLINE_REFUSALS, SELF_PLAY_READS
from nash_jax.engine import preparation
from nash_jax.recipes.ssr.anchors import evaluate_anchors
from nash_jax.recipes.ssr.config import (ANCHOR_STAGE, DATA_STAGE, STAGE,
                                                   AnchorConfig, SSRConfig, SandboxConfig, check,
                                                   rows_per_step)
from nash_jax.recipes.ssr.game import Game
from nash_jax.recipes.ssr.initial_policy import warm_start
from nash_jax.recipes.ssr.report import summary_lines, write_report
from nash_jax.recipes.ssr.rounds import Round, play
from nash_jax.recipes.ssr.task import TaskData, task_data
from nash_jax.recipes.ssr.training import plan_step, train
from nash_jax.engine import policy_files
__all__ = ["ANCHOR_STAGE", "DATA_STAGE", "STAGE", "AnchorConfig",
           "SSRConfig", "Game", "Round", "SandboxConfig", "TaskData", "check",
           "evaluate_anchors", "play", "plan_step", "rows_per_step", "run_ssr",
           "summary_lines", "task_data", "train", "warm_start", "write_report"]


def run_ssr(config, run):
    mesh = preparation.fitting_mesh(config)
    tokenizer = policy_files.load_policy_tokenizer(config.model, run)
    task = task_data(config, run)
    if preparation.is_builtin(config) or config.warm_start.fit_model:
        warm_start(config, run, tokenizer, mesh, task)
    game = Game(config, tokenizer, mesh)
    if not run.done(STAGE):
        train(config, run, task, game)
    return write_report(config, run, task)


register(Recipe(name="ssr", run=run_ssr, section="ssr",
                section_type=SSRConfig, check=check, summary=summary_lines,
                report_options=(), builtin_models=("builtin:ssr",), plan_step=plan_step,
                batch_sizes=lambda config: {
                    "ssr rows per step (repositories_per_step × injectors_per_repository × "
                    "(1 + solvers_per_artifact))": rows_per_step(config.ssr)},
                reads=SELF_PLAY_READS, formerly="bug_injection", fits_model_dirs=True,
                refusals=ONLINE_REFUSALS))
