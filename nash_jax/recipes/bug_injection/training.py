"""The update and the loop around it: what one step trains (`plan_step`, which `nash-jax plan` sizes
too) and the resumable training stage (repositories drawn per step, anchors every
`anchors.eval_every` steps, snapshots)."""

import numpy as np

from nash_jax.recipes.bug_injection.anchors import evaluate_anchors
from nash_jax.recipes.bug_injection.config import ANCHOR_STAGE, STAGE, rows_per_step
from nash_jax.recipes.bug_injection.credit import learner_batch, learner_rows
from nash_jax.recipes.bug_injection.rounds import play
from nash_jax.engine.learner import pg_step_shape, start
from nash_jax.rollout.sampling import pad_id_of
from nash_jax.runs.keys import stage_key
from nash_jax.runs.metrics import defined_metrics
from nash_jax.engine import policy_files
def train(config, run, task, game, snapshots):
    b, a = config.bug_injection, config.bug_injection.anchors
    shape = plan_step(config)
    online = start(config, run, game.mesh, initial_dir=policy_files.initial_policy_dir(config.model.path, run),
                   tokenizer_dir=policy_files.tokenizer_source(config.model, run), objective=shape.objective,
                   total_steps=b.steps, **shape.hyperparameters)
    model_def, step_fn = online.model_def, online.step_fn
    reference = online.reference_logprobs() if b.kl_coef > 0 else None
    pad_id, capacity = pad_id_of(game.tokenizer), rows_per_step(b)
    per_snapshot = b.steps // b.snapshots

    def anchors(step, params):
        metrics = evaluate_anchors(config, game, task, model_def.merge(params), run, step)
        run.log_metrics(ANCHOR_STAGE, step, defined_metrics(metrics))

    def work(step, state, extra, _):
        if step % a.eval_every == 0:
            anchors(step, state.params)
        sandbox_before = game.sandbox_s
        rng = np.random.default_rng([config.seed, step])
        chosen = [task.train[i] for i in rng.choice(len(task.train), size=b.repositories_per_step,
                                                    replace=len(task.train) < b.repositories_per_step)]
        rnd = play(config, game, chosen, model_def.merge(state.params), step,
                   inject_key=stage_key(config.seed, 0, "inject", step),
                   solve_key=stage_key(config.seed, 0, "repair", step), crash_prefix=STAGE)
        rows, info = learner_rows(config, rnd, capacity)
        batch = learner_batch(rows, pad_id, capacity, shape.length)
        if reference is not None:
            batch["ref_logp"] = reference(step_fn, batch)
        state, metrics = step_fn.jitted(state, step_fn.place_global(batch))
        metrics = defined_metrics({**dict(metrics), **info, "sandbox_s": game.sandbox_s - sandbox_before})
        if (step + 1) % per_snapshot == 0:
            online.export(state.params, snapshots[(step + 1) // per_snapshot - 1])
        return state, extra, metrics

    state, _ = online.loop(STAGE, total=b.steps, work=work, extra={})
    anchors(b.steps, state.params)


def plan_step(config):
    """One update: every rollout of a step (rows_per_step), with a k3 KL to π_0 when kl_coef > 0."""
    b = config.bug_injection
    longest = max(b.injector_max_tokens, b.solver_max_tokens)
    return pg_step_shape(b, rows=rows_per_step(b), max_len=longest, prompt_tokens=config.data.max_prompt_tokens)
