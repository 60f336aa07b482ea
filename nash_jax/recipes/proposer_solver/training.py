"""The update and the loop around it: what one step trains (`plan_step`, which `nash-jax plan` sizes too)
and the resumable training stage (sources drawn per step, the alternating schedule's frozen solver,
anchors every `anchors.eval_every` steps, solver snapshots)."""

import jax.numpy as jnp
import numpy as np

from nash_jax.engine import policy_files
from nash_jax.engine.learner import copy, pg_step_shape, start
from nash_jax.recipes.proposer_solver.anchors import EMBED_DIM, evaluate_anchors
from nash_jax.recipes.proposer_solver.config import ANCHOR_STAGE, STAGE, rows_per_step
from nash_jax.recipes.proposer_solver.credit import learner_batch, learner_rows
from nash_jax.recipes.proposer_solver.rounds import play
from nash_jax.recipes.proposer_solver.task import heldout_texts
from nash_jax.runs.keys import stage_key
from nash_jax.runs.metrics import defined_metrics
from nash_jax.rollout.sampling import pad_id_of


def train(config, run, task, game, snapshots):
    ps, a = config.proposer_solver, config.proposer_solver.anchors
    step = plan_step(config)
    online = start(config, run, game.mesh, initial_dir=policy_files.initial_policy_dir(config.model.path, run),
                   tokenizer_dir=policy_files.tokenizer_source(config.model, run), objective=step.objective,
                   total_steps=ps.steps, **step.hyperparameters)
    model_def, step_fn = online.model_def, online.step_fn
    reference = online.reference_logprobs() if ps.kl_coef > 0 else None
    held = heldout_texts(task)
    pad_id = pad_id_of(game.tokenizer)
    capacity, width = rows_per_step(ps), step.length
    per_snapshot = ps.steps // a.snapshots

    def anchors(step, params, extra):
        metrics, extra = evaluate_anchors(config, game, task, model_def.merge(params), extra, held,
                                            step)
        run.log_metrics(ANCHOR_STAGE, step, defined_metrics(metrics))
        return extra

    def work(step, state, extra, _):
        if step % a.eval_every == 0:
            extra = anchors(step, state.params, extra)
        proposer_phase = solver_phase = True
        if ps.schedule == "alternating":
            proposer_phase = (step // ps.phase_steps) % 2 == 0
            solver_phase = not proposer_phase
            if proposer_phase and step % ps.phase_steps == 0:
                extra = {**extra, "frozen_solver": copy(state.params)}
        policy = model_def.merge(state.params)
        solver = model_def.merge(extra["frozen_solver"]) if ps.schedule == "alternating" and \
            proposer_phase else policy
        rng = np.random.default_rng([config.seed, step])
        chosen = [task.sources[i] for i in rng.choice(len(task.sources), size=ps.sources_per_step,
                                                      replace=len(task.sources) < ps.sources_per_step)]
        episode = play(config, game, chosen, policy, solver, step, held,
                       propose_key=stage_key(config.seed, 0, "propose", step),
                       solve_key=stage_key(config.seed, 0, "solve", step),
                       crash_prefix=STAGE)
        rows, info = learner_rows(config, game, episode, capacity, proposer_phase, solver_phase)
        if rows is None:
            metrics = {"loss": 0.0, "skipped_update": 1.0}
        else:
            batch = learner_batch(rows, pad_id, capacity, width)
            if reference is not None:
                batch["ref_logp"] = reference(step_fn, batch)
            state, metrics = step_fn.jitted(state, step_fn.place_global(batch))
            metrics = dict(metrics)
        metrics.update(info, phase=float(solver_phase and not proposer_phase))
        metrics = defined_metrics(metrics)
        if (step + 1) % per_snapshot == 0:
            online.export(state.params, snapshots[(step + 1) // per_snapshot - 1])
        return state, extra, metrics

    extra = {"archive": jnp.zeros((a.archive_size, EMBED_DIM), jnp.float32),
             "archive_count": jnp.int32(0)}
    if ps.schedule == "alternating":
        extra["frozen_solver"] = copy(online.state.params)
    state, extra = online.loop(STAGE, total=ps.steps, work=work, extra=extra)
    anchors(ps.steps, state.params, extra)


def plan_step(config):
    """One update: every rollout of a step (rows_per_step), with a k3 KL to π_0 when kl_coef > 0."""
    ps = config.proposer_solver
    longest = max(ps.proposer_max_tokens, ps.solver_max_tokens)
    return pg_step_shape(ps, rows=rows_per_step(ps), max_len=longest,
                         prompt_tokens=config.data.max_prompt_tokens)
