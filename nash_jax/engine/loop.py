"""The one training loop: checkpoints, resumption, metrics and progress around a recipe's step.

A recipe passes in the work of one step, `work(step, state, extra, item) -> (state, extra, metrics)`:
sample, score, build a batch, update — whatever its method needs. `state` is the TrainState; `extra` is
a dict of further array trees that must survive a restart with it (Nash-MD's μ, role baselines, an
archive); `item` is the next element of `batches` (a grain iterator whose position is checkpointed
too), or None without one. Every `checkpoint_every` steps an orbax checkpoint under
RUN_DIR/<stage>/checkpoints holds all three, so that a rerun continues from the latest and ends exactly
where an uninterrupted run ends.
"""

import time

import jax
import numpy as np

from nash_jax import data, runs
from nash_jax.train import init_train_state, make_optimizer, make_step


def train_loop(run, stage, *, state, total, work, checkpoint_every, batches=None, extra=None,
               max_skipped_fraction=0.1):
    """Run steps [start, total) of `work`, resuming from the latest checkpoint; → (state, extra).

    Metrics go to metrics.jsonl and TensorBoard under `stage`. A step's metrics are fetched after the
    next step is queued (building the next batch on the host overlaps the device's work), except at a
    checkpoint, whose step's metrics are written before it so that a kill right after loses none.
    Once more than `max_skipped_fraction` of the steps were skipped as non-finite, the loop stops with
    an error naming the step and its values. On a stop request (SIGINT, SIGTERM: runs.request_stop)
    it saves a checkpoint after the current step and raises runs.Interrupted.
    """
    extra = dict(extra or {})
    manager = runs.checkpoint_manager(run / stage / "checkpoints", checkpoint_every)
    log = _StepLog(run, stage, runs.progress(total, stage, "step"), max_skipped_fraction * total)
    try:
        start = 0
        restored = runs.restore_checkpoint(manager, {"state": state, **extra})
        if restored is not None:
            start, trees, saved = restored
            state, extra = trees.pop("state"), trees
            log.skipped = saved.get("skipped", 0)
            if batches is not None:
                batches.set_state(saved["data"])
        log.bar.update(start)
        pending = None
        with runs.training_loop_running():
            for step in range(start, total):
                log.begin(step + 1)  # unless a checkpoint began it (its save is this step's)
                state, extra, metrics = work(step, state, extra,
                                             next(batches) if batches is not None else None)
                if pending is not None:
                    log(*pending)
                pending = (step + 1, metrics)
                stop = _agreed(runs.stop_requested()) and step + 1 < total
                if stop or ((step + 1) % checkpoint_every == 0 and step + 1 < total):
                    log(*pending)
                    pending = None
                    log.begin(step + 2)
                    runs.save_checkpoint(manager, step + 1, {"state": state, **extra}, {
                        "data": batches.get_state() if batches is not None else None,
                        "skipped": log.skipped})
                runs.crash_point(f"{stage}:step={step + 1}")
                if stop:
                    raise runs.Interrupted(f"{stage}: stopped after step {step + 1} of {total}, with "
                                           "a checkpoint")
        if pending is not None:
            log(*pending)
    finally:
        log.bar.close()
        manager.close()
    return state, extra


def _agreed(flag):
    """Whether any process saw `flag` (a stop request reaches hosts at different moments; all of
    them must checkpoint and stop at the same step)."""
    if jax.process_count() == 1:
        return flag
    from jax.experimental import multihost_utils
    return bool(multihost_utils.process_allgather(np.array(flag)).any())


class _StepLog:
    """Fetches and logs steps' metrics, and stops the run once too many steps were skipped as
    non-finite. A step's step_s is the wall time from its start to the next step's start, or, where no
    next step has started (the last, or one that checkpoints), to its metrics' arrival; a checkpoint's
    save, written after its step's metrics, is charged to the step after it. (With the logging a step
    behind, the time between two arrivals gave the first step two steps' work and the last none.)"""

    def __init__(self, run, stage, bar, max_skipped):
        self.run, self.stage, self.bar, self.max_skipped = run, stage, bar, max_skipped
        self.skipped, self.started = 0, {}

    def begin(self, step):
        self.started.setdefault(step, time.perf_counter())

    def __call__(self, step, metrics):
        metrics = jax.device_get(metrics)
        end = self.started.get(step + 1, time.perf_counter())
        self.run.log_metrics(self.stage, step, {**metrics, "step_s": end - self.started.pop(step)})
        self.bar.update(1)
        if "loss" in metrics:  # a step with an empty batch trained nothing
            self.bar.set_postfix(loss=f"{float(metrics['loss']):.4g}")
        if metrics.get("skipped", 0.0) > 0:
            self.skipped += 1
            if self.skipped > self.max_skipped:
                values = ", ".join(f"{k}={float(metrics[k]):.4g}" for k in ("loss", "grad_norm")
                                   if k in metrics)
                raise ValueError(f"{self.stage}: step {step} was not applied ({values}: not finite); "
                                 f"{self.skipped} steps skipped so far, more than "
                                 "train.max_skipped_fraction allows; check the learning rate, the "
                                 "clipping and the data (a NaN in anchors, rewards or judgments)")


def fit_rows(run, stage, model, rows, *, objective, to_batch, optimizer, batch_size, epochs, seed,
             checkpoint_every, mesh, micro_batches=1, max_skipped_fraction=0.1, logprob_chunk=None,
             **hyperparameters):
    """Train `model` on fixed `rows` (shuffled by `seed`, `epochs` passes, full batches of
    to_batch(rows)) with `objective`, and return it. Offline training: SPPO's iterations, warm starts.
    """
    total = data.num_batches(len(rows), batch_size, epochs=epochs, drop_remainder=True)
    if total == 0:
        raise ValueError(f"{stage}: {len(rows)} training examples × {epochs} epochs make no full batch "
                         f"of train.batch_size={batch_size}; lower the batch size or add prompts")
    tx, schedule = make_optimizer(optimizer, total)
    model_def, state, shardings = init_train_state(model, tx, mesh=mesh, seed=seed)
    chunking = {} if logprob_chunk is None else {"logprob_chunk": logprob_chunk}
    step_fn = make_step(objective, model_def, tx, schedule, shardings, mesh, micro_batches=micro_batches,
                        **chunking, **hyperparameters)

    def work(step, state, extra, batch_rows):
        state, metrics = step_fn.jitted(state, step_fn.place_global(to_batch(batch_rows)))
        return state, extra, metrics

    batches = iter(data.batches(rows, batch_size, seed=seed, epochs=epochs, drop_remainder=True))
    state, _ = train_loop(run, stage, state=state, total=total, work=work, batches=batches,
                          checkpoint_every=checkpoint_every, max_skipped_fraction=max_skipped_fraction)
    return model_def.merge(state.params)

