"""The one training loop: checkpoints, resumption, metrics and progress around a recipe's step.

A recipe passes in the work of one step, `work(step, state, extra, item) -> (state, extra, metrics)`:
sample, score, build a batch, update — whatever its method needs. `state` is the TrainState; `extra` is
a dict of further array trees that must survive a restart with it (Nash-MD's μ, role baselines, an
archive); `item` is the next element of `batches` (a grain iterator whose position is checkpointed
too), or None without one. Every `checkpoint_every` steps an orbax checkpoint under
RUN_DIR/<stage>/checkpoints holds all three, so that a rerun continues from the latest and ends exactly
where an uninterrupted run ends.
"""

import dataclasses
import time

import jax

from nash_jax import data, runs
from nash_jax.train import init_train_state, make_optimizer, make_step


def train_loop(run, stage, *, state, total, work, checkpoint_every, batches=None, extra=None):
    """Run steps [start, total) of `work`, resuming from the latest checkpoint; → (state, extra).

    Metrics go to metrics.jsonl and TensorBoard under `stage`. A step's metrics are fetched after the
    next step is queued (building the next batch on the host overlaps the device's work), except at a
    checkpoint, whose step's metrics are written before it so that a kill right after loses none.
    """
    extra = dict(extra or {})
    manager = runs.checkpoint_manager(run / stage / "checkpoints", checkpoint_every)
    start = 0
    restored = runs.restore_checkpoint(manager, {"state": state, **extra})
    if restored is not None:
        start, trees, saved = restored
        state, extra = trees.pop("state"), trees
        if batches is not None:
            batches.set_state(saved["data"])
    bar = runs.progress(total, stage, "step")
    bar.update(start)
    pending, last = None, time.perf_counter()
    for step in range(start, total):
        state, extra, metrics = work(step, state, extra, next(batches) if batches is not None else None)
        if pending is not None:
            last = _log_step(run, stage, bar, *pending, last)
        pending = (step + 1, metrics)
        if (step + 1) % checkpoint_every == 0 and step + 1 < total:
            last, pending = _log_step(run, stage, bar, *pending, last), None
            runs.save_checkpoint(manager, step + 1, {"state": state, **extra},
                                 {"data": batches.get_state() if batches is not None else None})
        runs.crash_point(f"{stage}:step={step + 1}")
    if pending is not None:
        _log_step(run, stage, bar, *pending, last)
    bar.close()
    manager.close()
    return state, extra


def _log_step(run, stage, bar, step, metrics, last):
    """Fetch and log one step's metrics; step_s is the wall time since the previous step's arrived."""
    metrics = jax.device_get(metrics)
    now = time.perf_counter()
    run.log_metrics(stage, step, {**metrics, "step_s": now - last})
    bar.update(1)
    bar.set_postfix(loss=f"{float(metrics['loss']):.4g}")
    return now


def fit_rows(run, stage, model, rows, *, objective, to_batch, optimizer, batch_size, epochs, seed,
             checkpoint_every, mesh, micro_batches=1, **hyperparameters):
    """Train `model` on fixed `rows` (shuffled by `seed`, `epochs` passes, full batches of
    to_batch(rows)) with `objective`, and return it. Offline training: SPPO's iterations, warm starts.
    """
    total = data.num_batches(len(rows), batch_size, epochs=epochs, drop_remainder=True)
    if total == 0:
        raise ValueError(f"{stage}: {len(rows)} training examples × {epochs} epochs make no full batch "
                         f"of train.batch_size={batch_size}; lower the batch size or add prompts")
    tx, schedule = make_optimizer(dataclasses.replace(optimizer, total_steps=total))
    model_def, state, shardings = init_train_state(model, tx, mesh=mesh, seed=seed)
    step_fn = make_step(objective, model_def, tx, schedule, shardings, mesh, micro_batches=micro_batches,
                        **hyperparameters)

    def work(step, state, extra, batch_rows):
        state, metrics = step_fn.jitted(state, step_fn.place_global(to_batch(batch_rows)))
        return state, extra, metrics

    batches = iter(data.batches(rows, batch_size, seed=seed, epochs=epochs, drop_remainder=True))
    state, _ = train_loop(run, stage, state=state, total=total, work=work, batches=batches,
                          checkpoint_every=checkpoint_every)
    return model_def.merge(state.params)


def optimizer_config(config, total_steps, **overrides):
    """The OptimizerConfig of a run config's train.optimizer section."""
    from nash_jax.train import OptimizerConfig

    o = config.train.optimizer
    return OptimizerConfig(**{**dict(name=o.name, learning_rate=o.learning_rate, schedule=o.schedule,
                                     warmup_ratio=o.warmup_ratio, weight_decay=o.weight_decay,
                                     clip_norm=o.clip_norm), "total_steps": total_steps, **overrides})
