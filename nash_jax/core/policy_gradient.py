"""The per-token policy-gradient loss of the GRPO family (PPO clipping, DAPO clip-higher, k3 KL), pure JAX.

The advantages come from `core.advantages` (group-relative or role-conditioned); this module turns
them into a differentiable scalar over response tokens.
"""

import jax
import jax.numpy as jnp

from nash_jax.core.advantages import aggregate_loss

_F32 = jnp.float32


def _check_shapes(logp, behaviour_logp, advantages, mask, ref_logp):
    token_arrays = {"behaviour_logp": behaviour_logp, "mask": mask, "ref_logp": ref_logp}
    for name, array in token_arrays.items():
        if array is not None and array.shape != logp.shape:
            raise ValueError(f"{name} has shape {array.shape}; expected logp's shape {logp.shape} "
                             "(one entry per response token)")
    if logp.ndim != 2 or advantages.shape != logp.shape[:1]:
        raise ValueError(f"advantages has shape {advantages.shape} for logp of shape {logp.shape}; "
                         "expected logp [N, T] and advantages [N] (one per rollout)")


def pg_token_loss(logp, behaviour_logp, advantages, mask, *, clip_low=0.2, clip_high=0.2,
                  kl_coef=0.0, ref_logp=None, aggregation="token-mean", max_len=None):
    """Clipped surrogate loss over response tokens → (loss, metrics), float32.

    For token t of rollout i, with ρ_it = exp(log π_θ − log π_behaviour) and k3 the low-variance KL
    estimator against the reference policy:

        ℓ_it = −min(ρ_it A_i, clip(ρ_it, 1 − ε_low, 1 + ε_high) A_i) + kl_coef · k3_it
        k3_it = exp(log π_ref − log π_θ) − (log π_ref − log π_θ) − 1 ≥ 0

    then reduced by `aggregate_loss(ℓ, mask, aggregation, max_len)`. ε_low = clip_low and
    ε_high = clip_high. Setting ε_high > ε_low is DAPO's clip-higher, which leaves low-probability
    tokens room to grow.

    behaviour_logp are the log-probs of the distribution actually sampled, after temperature and
    top-p/top-k truncation (`Samples.logprobs`, not `logprobs_raw`). The ratio is then an importance
    weight against the real behaviour distribution. On the first epoch over fresh samples drawn at
    temperature 1 without truncation, ρ = 1, and the gradient is REINFORCE's, −A_i ∇ log π_θ per token
    (scaled by the aggregation). Tokens whose ratio the clip binds carry no gradient.

    logp, behaviour_logp, mask, ref_logp [N, T]; advantages [N]. The behaviour and reference log-probs
    and the advantages are data: no gradient flows into them.

    metrics: clip_fraction (share of tokens whose clip binds), ratio_mean, kl (mean k3; 0 without
    ref_logp), advantage_mean and advantage_std (over rollouts with at least one token).
    """
    _check_shapes(logp, behaviour_logp, advantages, mask, ref_logp)
    mask = jnp.asarray(mask, bool)
    logp = logp.astype(_F32)
    # where() on the log-ratio, not on the loss, so that garbage under padding never reaches exp
    log_ratio = jnp.where(mask, logp - jax.lax.stop_gradient(behaviour_logp.astype(_F32)), 0.0)
    ratio = jnp.exp(log_ratio)
    a = jax.lax.stop_gradient(advantages.astype(_F32))[:, None]
    unclipped = ratio * a
    clipped = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high) * a
    token_loss = -jnp.minimum(unclipped, clipped)
    if ref_logp is None:
        k3 = jnp.zeros_like(logp)
    else:
        ref_gap = jnp.where(mask, jax.lax.stop_gradient(ref_logp.astype(_F32)) - logp, 0.0)
        k3 = jnp.expm1(ref_gap) - ref_gap  # exp(g) − g − 1 without cancellation near g = 0
        token_loss = token_loss + kl_coef * k3
    loss = aggregate_loss(token_loss, mask, aggregation, max_len)

    def token_mean(x):
        return aggregate_loss(jax.lax.stop_gradient(x), mask, "token-mean")

    rows = jnp.any(mask, axis=-1)
    num_rows = jnp.maximum(jnp.sum(rows, dtype=_F32), 1.0)
    adv = a[:, 0]
    adv_mean = jnp.sum(jnp.where(rows, adv, 0.0)) / num_rows
    adv_var = jnp.sum(jnp.where(rows, (adv - adv_mean) ** 2, 0.0)) / num_rows
    metrics = {"clip_fraction": token_mean((clipped < unclipped).astype(_F32)),
               "ratio_mean": token_mean(ratio), "kl": token_mean(k3),
               "advantage_mean": adv_mean, "advantage_std": jnp.sqrt(adv_var)}
    return loss, metrics
