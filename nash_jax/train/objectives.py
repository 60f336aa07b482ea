"""The training objectives by name: one table that the one step factory (train/steps.py) reads.

An objective declares the batch fields it needs, with their shapes, and computes its loss from the
policy's per-token log-probs. Shapes are written with symbols: `N` examples, `T` tokens per row, and
integers for fixed sizes. Every batch carries `tokens`, `segment_ids` and `loss_mask` of the objective's
`token_shape` ([N, T], or [N, 2, T] for (winner, loser) pairs); the step computes

    token_logp [..., T − 1]   log π_θ(tokens[..., t + 1] | tokens[..., ≤ t]), 0 outside the mask
    mask       [..., T − 1]   loss_mask[..., 1:]: the response tokens whose log-probs count

and calls `loss(token_logp, mask, batch, **hyperparameters) -> (loss, per-example metrics)`. A declared
field with a `T` axis is a per-token quantity aligned with `tokens` (a behaviour log-prob of token t
sits at position t); the step drops its position 0 so that it lines up with `token_logp`.

Per-example metrics are logged as their mean; `log_ratio`, where an objective reports one, also as its
minimum and maximum.
"""

from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import jax
import jax.numpy as jnp

from nash_jax.core import losses, policy_gradient

TOKEN_FIELDS = ("tokens", "segment_ids", "loss_mask")


@dataclass(frozen=True)
class Objective:
    name: str
    loss: Callable  # (token_logp, mask, batch, **hyperparameters) -> (loss, {name: [N] values})
    fields: dict = field(default_factory=dict)  # batch field -> shape, beyond the token fields
    token_shape: tuple = ("N", "T")
    hyperparameters: tuple = ()  # keyword arguments `loss` requires
    # its log-probs are those of the sampling distribution (logits / the sampler's temperature):
    # true where the loss compares them with the sampler's own, as a policy gradient's ratio does
    tempered: bool = False

    @property
    def batch_shapes(self):
        """Every field the batch must hold -> its symbolic shape."""
        return {**{f: self.token_shape for f in TOKEN_FIELDS}, **self.fields}


def sequence_sums(token_logp):
    """Σ_t over the last axis: sequence log-probs from per-token ones."""
    return jnp.sum(token_logp, axis=-1)


def sppo(token_logp, mask, batch, *, eta):
    """Soft SPPO: regress log π_θ(y)/π_t(y) on η (P̂(y) − 1/2)."""
    logp = sequence_sums(token_logp)
    loss = losses.sppo_loss(logp, batch["anchor_logp"], batch["win_rate"], eta)
    log_ratio = logp - batch["anchor_logp"]
    target = eta * (batch["win_rate"] - 0.5)
    reached = jnp.where(target >= 0, log_ratio >= target, log_ratio <= target)
    return loss, {"log_ratio": log_ratio, "target_reached": reached.astype(jnp.float32)}


def pair(token_logp, mask, batch, *, beta, loss_fn):
    """A pairwise loss on (winner, loser) = index (0, 1) of the second axis: SPPO-hard, DPO or IPO."""
    logp = sequence_sums(token_logp)  # [N, 2]
    anchor = batch["anchor_logp"]
    loss = loss_fn(logp[:, 0], anchor[:, 0], logp[:, 1], anchor[:, 1], beta)
    log_ratio = logp - anchor
    margin = log_ratio[:, 0] - log_ratio[:, 1]
    return loss, {"log_ratio": log_ratio, "margin_positive": (margin > 0).astype(jnp.float32)}


def nash_md_pg(token_logp, mask, batch, *, tau):
    """Regularised REINFORCE against a mixture opponent: reward P(y ≻ y'), baseline 1/2, KL weight τ."""
    logp = sequence_sums(token_logp)
    loss = losses.nash_md_pg_loss(logp, batch["ref_logp"], batch["pref"], tau)
    return loss, {"log_ratio": logp - batch["ref_logp"]}


def sft(token_logp, mask, batch):
    """Supervised fine-tuning: mean negative log-likelihood per loss-mask token."""
    loss = -jnp.sum(token_logp) / jnp.maximum(jnp.sum(mask), 1)
    return loss, {"logp": sequence_sums(token_logp)}


def pg(token_logp, mask, batch, *, clip_low, clip_high, aggregation, max_len, kl_coef=0.0):
    """The GRPO family's clipped policy gradient on per-example advantages (core/policy_gradient.py).

    behaviour_logp [N, T] holds, per response token, the log-prob of the distribution the sampler
    actually drew from (temperature and top-p/top-k applied: the sampler's `logprobs`, not
    `logprobs_raw`), and token_logp is π_θ at the same temperature (the objective is `tempered`: the
    step divides the logits by the sampling temperature, as verl and TRL do). So the ratio
    π_θ/π_behaviour is 1 on the first epoch over fresh samples when the sampler does not truncate
    (top-p 1, top-k 0), and the clip bounds how far later epochs over the same batch move from it.
    Against untempered log-probs, samples at 0.7 start with ratios far from 1, and the clip then drops
    the gradient of exactly the rare tokens that did well. `pg_kl` adds ref_logp [N, T] (π_0 at the
    same temperature) and the k3 penalty.

    Several epochs over one batch are several calls of the step on it. With micro-batches, the loss
    is the mean of the micro-batches' losses: exact for `seq-mean-*` and `drgrpo` (whose divisor is
    fixed), a mean of per-micro-batch token means for `token-mean`.

    Metrics: the clip fraction, the ratio, the KL, advantage statistics, and `entropy`, estimated on
    the sampled tokens as −mean log π_θ(y_t) (unbiased for on-policy samples; no [N, T, V] logits).
    """
    loss, metrics = policy_gradient.pg_token_loss(
        token_logp, batch["behaviour_logp"], batch["advantage"], mask, clip_low=clip_low,
        clip_high=clip_high, kl_coef=kl_coef, ref_logp=batch.get("ref_logp"),
        aggregation=aggregation, max_len=max_len)
    entropy = -jnp.sum(jax.lax.stop_gradient(token_logp)) / jnp.maximum(jnp.sum(mask), 1)
    return loss, {**metrics, "entropy": entropy}


_PAIR_FIELDS = {"anchor_logp": ("N", 2)}
_PG_FIELDS = {"behaviour_logp": ("N", "T"), "advantage": ("N",)}
_PG_HYPERPARAMETERS = ("clip_low", "clip_high", "aggregation", "max_len")

OBJECTIVES = {o.name: o for o in (
    Objective("sppo", sppo, {"anchor_logp": ("N",), "win_rate": ("N",)}, hyperparameters=("eta",)),
    Objective("sppo_hard", partial(pair, loss_fn=losses.sppo_hard_loss), _PAIR_FIELDS, ("N", 2, "T"),
              ("beta",)),
    Objective("dpo", partial(pair, loss_fn=losses.dpo_loss), _PAIR_FIELDS, ("N", 2, "T"), ("beta",)),
    Objective("ipo", partial(pair, loss_fn=losses.ipo_loss), _PAIR_FIELDS, ("N", 2, "T"), ("beta",)),
    Objective("nash_md_pg", nash_md_pg, {"ref_logp": ("N",), "pref": ("N",)}, hyperparameters=("tau",)),
    Objective("sft", sft),
    Objective("pg", pg, _PG_FIELDS, hyperparameters=_PG_HYPERPARAMETERS, tempered=True),
    Objective("pg_kl", pg, {**_PG_FIELDS, "ref_logp": ("N", "T")},
              hyperparameters=(*_PG_HYPERPARAMETERS, "kl_coef"), tempered=True),
)}


def register(objective):
    """Add an objective to the table (a recipe's own, or a new loss); its name must be new."""
    if objective.name in OBJECTIVES and OBJECTIVES[objective.name] is not objective:
        raise ValueError(f"an objective named {objective.name!r} is already registered")
    OBJECTIVES[objective.name] = objective
    return objective


def get(name):
    if name not in OBJECTIVES:
        raise ValueError(f"objective {name!r} is not one of {sorted(OBJECTIVES)}")
    return OBJECTIVES[name]
