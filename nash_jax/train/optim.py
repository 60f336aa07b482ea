"""Optimisers and learning-rate schedules on optax, configured by the run config's `train.optimizer`
section (config.OptimizerConfig: name, learning_rate, schedule, warmup_ratio, weight_decay, clip_norm,
b1, b2, eps, rmsprop_decay) and a number of steps."""

import functools
import math

import jax
import optax

OPTIMIZERS = ("adamw", "rmsprop", "sgd")
SCHEDULES = ("linear", "cosine", "constant")


def learning_rate_schedule(config, total_steps):
    """step -> learning rate: 0 → peak over ceil(warmup_ratio · total_steps) steps, then the decay.

    The same curve as transformers' get_linear/cosine_schedule_with_warmup, step for step.
    """
    if total_steps < 1:
        raise ValueError(f"a schedule over {total_steps} steps; expected at least 1")
    peak, total = config.learning_rate, total_steps
    warmup = math.ceil(config.warmup_ratio * total)
    if config.schedule == "constant":
        decay = optax.constant_schedule(peak)
    elif config.schedule == "linear":
        decay = optax.linear_schedule(peak, 0.0, max(total - warmup, 1))
    else:
        decay = optax.cosine_decay_schedule(peak, max(total - warmup, 1))
    if warmup == 0:
        return decay
    return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), decay], [warmup])


def decay_mask(params):
    """True for parameters that take weight decay: matrices, not norm scales or biases."""
    return jax.tree.map(lambda x: x.ndim > 1, params)


@functools.lru_cache(maxsize=32)
def make_optimizer(config, total_steps):
    """(direction, schedule) for `config` (a train.optimizer section) over `total_steps` steps: `direction` is the optax transformation of everything but
    the learning rate (clipping, moments, weight decay), and an update is −schedule(step) × its output
    (`descent`). The learning rate is applied outside the transformation so that the schedule runs over
    the steps a run takes, applied or not: a skipped update (no gradient, or not finite) keeps the
    moments as they were and still moves the schedule on (train/steps.py). The same objects come back
    for equal configs, so that a step compiled for one is reused for the other."""
    schedule = learning_rate_schedule(config, total_steps)
    if config.name == "adamw":  # optax.adamw without its scale_by_learning_rate
        core = optax.chain(optax.scale_by_adam(b1=config.b1, b2=config.b2, eps=config.eps),
                           optax.add_decayed_weights(config.weight_decay, mask=decay_mask))
    else:
        core = (optax.scale_by_rms(decay=config.rmsprop_decay, eps=config.eps,
                                   eps_in_sqrt=False)  # torch: g / (sqrt(v) + eps)
                if config.name == "rmsprop" else optax.identity())
        if config.weight_decay:
            core = optax.chain(optax.add_decayed_weights(config.weight_decay, mask=decay_mask), core)
    if config.clip_norm is not None:
        core = optax.chain(optax.clip_by_global_norm(config.clip_norm), core)
    return core, schedule


def descent(direction, learning_rate):
    """The parameter update of a `direction` tree at `learning_rate`: −learning_rate × direction."""
    return jax.tree.map(lambda d: (-learning_rate * d).astype(d.dtype), direction)
