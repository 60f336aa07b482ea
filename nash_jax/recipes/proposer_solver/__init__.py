"""Proposer–solver self-play: one policy writes problems and solves them.

Each step, on `sources_per_step` sources (seed problems or documents):

    propose   the policy writes `proposals_per_source` problems per source (proposer prompt)
    check     the answer source validates each proposal (parser, grounding) and fixes its gold answer
    solve     `solvers_per_problem` solver rollouts answer each valid problem (solver prompt)
    assemble  rollouts join their episode (one proposal + its solvers); only complete episodes leave the
              EpisodeAssembler, so a problem whose solvers did not all finish is not trained on
    reward    per complete episode, on the host: solver reward = correct (gold or majority label);
              p̂ = share correct; proposer reward = f(p̂) (learnability, tent, spice_variance, ssr), minus
              the BLEU-cluster repetition share under majority vote, or `invalid_value` when invalid
    advantage comparison groups: solvers within their problem, proposers within their source
              (selfplay.episodes.group_ids), each role with its own mode; role purity checked
    update    one clipped policy-gradient step (`pg`) on both roles' rows

`schedule: alternating` is R-Zero's: phases of `phase_steps` steps that train the proposer against a
frozen solver snapshot (taken at the start of the phase), then the solver on the proposals whose p̂ lies
in `band`.

Anchors, every `anchors.eval_every` steps (step 0 is the warm start) and at the end: greedy accuracy on a
fixed held-out problem set (never a seed, never trained on: a proposal equal to one is invalid), and on
a fixed set of anchor sources the valid-proposal rate, the p̂ distribution, mean learnability,
distinct-2, BLEU-cluster entropy, novelty against an archive of earlier anchor proposals (checkpointed),
the share of problems with signal, and the pseudo-label accuracy under majority vote. The report adds a
table of solver snapshots against the held-out set and against each other's problems.

Every `train.checkpoint_every` steps an orbax checkpoint holds the train state, the archive and the
frozen solver; a rerun continues from it and ends with the same parameters (every draw is keyed by
(seed, stage, step)). Crash points: `proposer_solver:propose:step=N`, `proposer_solver:solve:step=N`
(within step N) and `proposer_solver:step=N` (after its update).

The modules, by concern: config (the section, its checks, the stage names), task (sources, anchor
sources, held-out problems), game (proposing, solving, scoring with one policy), rounds (one round's
episodes), credit (advantages, the rows trained on, the batch), training (the step and the loop),
anchors, initial_policy (the tokenizer and the warm start) and report.
"""

from nash_jax.engine import Recipe, register
from nash_jax.engine.registry import ONLINE_REFUSALS, SELF_PLAY_READS
from nash_jax.engine.learner import snapshot_dirs
from nash_jax.engine import preparation
from nash_jax.engine import policy_files
from nash_jax.recipes.proposer_solver.anchors import EMBED_DIM, embed, evaluate_anchors
from nash_jax.recipes.proposer_solver.config import (ANCHOR_STAGE, STAGE,
                                                     AnchorConfig, ProposerSolverConfig, TaskConfig,
                                                     check, rows_per_step)
from nash_jax.recipes.proposer_solver.credit import learner_rows, round_metrics
from nash_jax.recipes.proposer_solver.game import Game
from nash_jax.recipes.proposer_solver.initial_policy import warm_start
from nash_jax.recipes.proposer_solver.report import summary_lines, write_report
from nash_jax.recipes.proposer_solver.rounds import HELDOUT, Round, play
from nash_jax.recipes.proposer_solver.task import TaskData, heldout_texts, task_data
from nash_jax.recipes.proposer_solver.training import plan_step, train
from nash_jax.selfplay import answer_sources

# the names other modules, tools and tests use
__all__ = ["ANCHOR_STAGE", "EMBED_DIM", "HELDOUT", "STAGE", "AnchorConfig", "Game", "ProposerSolverConfig",
           "Round", "TaskConfig", "TaskData", "check", "embed", "evaluate_anchors", "heldout_texts",
           "learner_rows", "play", "plan_step", "round_metrics", "rows_per_step",
           "run_proposer_solver", "summary_lines", "task_data", "train", "warm_start",
           "write_report"]


def run_proposer_solver(config, run):
    ps = config.proposer_solver
    mesh = preparation.fitting_mesh(config)
    tokenizer = policy_files.load_policy_tokenizer(config.model, run)
    task = task_data(config, run)
    source = answer_sources.answer_source(ps.answer_source, ps.task.name)
    if preparation.is_builtin(config):
        warm_start(config, run, tokenizer, mesh, task)
    game = Game(config, tokenizer, mesh, source)
    snapshots = snapshot_dirs(run, ps.anchors.snapshots)
    if not run.done(STAGE):
        train(config, run, task, game)
    return write_report(config, run, task, game, snapshots)


register(Recipe(name="proposer_solver", run=run_proposer_solver, section="proposer_solver",
                section_type=ProposerSolverConfig, check=check, summary=summary_lines,
                report_options=(), builtin_models=("builtin:proposer_solver",),
                plan_step=plan_step,
                batch_sizes=lambda config: {
                    "proposer_solver rows per step (sources_per_step × proposals_per_source × "
                    "(1 + solvers_per_problem))": rows_per_step(config.proposer_solver)},
                reads=SELF_PLAY_READS, refusals=ONLINE_REFUSALS))
