"""Proposer–solver's step for the online learner: `plan_step` (which `nash-jax plan` sizes too), one
round on the step's sources (the alternating schedule's frozen solver), its credit and batch, and the
anchors every `anchors.eval_every` steps."""

import jax.numpy as jnp

from nash_jax.engine.learner import OnlineLearner, OnlineRecipe, Rollout, copy, pg_step_shape
from nash_jax.recipes.proposer_solver.anchors import EMBED_DIM, evaluate_anchors
from nash_jax.recipes.proposer_solver.config import ANCHOR_STAGE, SCHEDULES, STAGE, rows_per_step
from nash_jax.recipes.proposer_solver.credit import learner_rows
from nash_jax.recipes.proposer_solver.rounds import play
from nash_jax.recipes.proposer_solver.task import heldout_texts
from nash_jax.rollout.sampling import pad_id_of
from nash_jax.runs.keys import stage_key
from nash_jax.selfplay.two_role import rows_batch


def train(config, run, task, game):
    ps, a = config.proposer_solver, config.proposer_solver.anchors
    shape, held = plan_step(config), heldout_texts(task)
    pad_id, capacity = pad_id_of(game.tokenizer), rows_per_step(ps)
    schedule = SCHEDULES[ps.schedule]

    def anchors(learner, step, params, extra):
        return evaluate_anchors(config, game, task, learner.policy(params), extra, held, step)

    def rollout(learner, step, params, extra, item):
        proposer_phase, solver_phase = schedule.phases(step, ps.phase_steps)
        if schedule.frozen_solver and proposer_phase and step % ps.phase_steps == 0:
            extra = {**extra, "frozen_solver": copy(params)}
        policy = learner.policy(params)
        solver = learner.policy(extra["frozen_solver"]) if schedule.frozen_solver and proposer_phase \
            else policy
        rng = learner.host_rng(step, "sources")
        chosen = [task.sources[i] for i in rng.choice(len(task.sources), size=ps.sources_per_step,
                                                      replace=len(task.sources) < ps.sources_per_step)]
        episode = play(config, game, chosen, policy, solver, step, held,
                       propose_key=stage_key(config.seed, 0, "propose", step),
                       solve_key=stage_key(config.seed, 0, "solve", step), crash_prefix=STAGE)
        rows, info = learner_rows(config, game, episode, capacity, proposer_phase, solver_phase)
        return Rollout(rows_batch(rows, pad_id, capacity, shape.length),
                       {**info, "phase": float(solver_phase and not proposer_phase)}, extra)

    def initial_extra(learner):
        extra = {"archive": jnp.zeros((a.archive_size, EMBED_DIM), jnp.float32),
                 "archive_count": jnp.int32(0)}
        if schedule.frozen_solver:
            extra["frozen_solver"] = copy(learner.state.params)
        return extra

    OnlineLearner(config, run, game.mesh).train(OnlineRecipe(
        stage=STAGE, steps=ps.steps, shape=shape, rollout=rollout, snapshots=a.snapshots,
        evaluate=anchors, eval_every=a.eval_every, eval_stage=ANCHOR_STAGE, extra=initial_extra))


def plan_step(config):
    """One update: every rollout of a step (rows_per_step), with a k3 KL to π_0 when kl_coef > 0."""
    ps = config.proposer_solver
    longest = max(ps.proposer_max_tokens, ps.solver_max_tokens)
    return pg_step_shape(ps, rows=rows_per_step(ps), max_len=longest,
                         prompt_tokens=config.data.max_prompt_tokens)
