"""Optimisers and learning-rate schedules on optax, configured by one small dataclass."""

import functools
import math
from dataclasses import dataclass

import jax
import optax

OPTIMIZERS = ("adamw", "rmsprop", "sgd")
SCHEDULES = ("linear", "cosine", "constant")


@dataclass(frozen=True)
class OptimizerConfig:
    name: str = "adamw"
    learning_rate: float = 5e-7
    schedule: str = "linear"  # warm-up, then linear or cosine decay to 0, or constant
    warmup_ratio: float = 0.1
    total_steps: int = 1000
    weight_decay: float = 0.0  # AdamW: decoupled; RMSprop/SGD: added to the gradient as torch does;
    #                            never applied to norm scales and biases (1-d parameters)
    clip_norm: float | None = 1.0  # global-norm clipping; None to disable
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    rmsprop_decay: float = 0.99  # torch's RMSprop alpha

    def __post_init__(self):
        if self.name not in OPTIMIZERS:
            raise ValueError(f"optimizer {self.name!r} is not one of {OPTIMIZERS}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule {self.schedule!r} is not one of {SCHEDULES}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ValueError(f"warmup_ratio={self.warmup_ratio!r}; expected [0, 1)")
        if self.total_steps < 1 or self.learning_rate < 0:
            raise ValueError(f"need total_steps ≥ 1 and learning_rate ≥ 0; got "
                             f"{self.total_steps!r}, {self.learning_rate!r}")


# What the official SPPO scripts run: RMSprop (the CLI overrides the YAML's AdamW), lr 5e-7, linear
# schedule with 10 % warm-up, HF Trainer's default clipping at 1.0 and no weight decay.
SPPO_PRESET = OptimizerConfig(name="rmsprop", learning_rate=5e-7, schedule="linear",
                              warmup_ratio=0.1, weight_decay=0.0, clip_norm=1.0)


def learning_rate_schedule(config):
    """step -> learning rate: 0 → peak over ceil(warmup_ratio · total) steps, then the decay.

    The same curve as transformers' get_linear/cosine_schedule_with_warmup, step for step.
    """
    peak, total = config.learning_rate, config.total_steps
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
def make_optimizer(config):
    """(direction, schedule) for `config`: `direction` is the optax transformation of everything but
    the learning rate (clipping, moments, weight decay), and an update is −schedule(step) × its output
    (`descent`). The learning rate is applied outside the transformation so that the schedule runs over
    the steps a run takes, applied or not: a skipped update (no gradient, or not finite) keeps the
    moments as they were and still moves the schedule on (train/steps.py). The same objects come back
    for equal configs, so that a step compiled for one is reused for the other."""
    schedule = learning_rate_schedule(config)
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
