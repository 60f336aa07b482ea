"""KL(π ‖ π_0) of two policies' next-token distributions, exactly over the vocabulary, as pure JAX.

A report's "KL to π_0" is Σ_t KL(π(·|x, y_<t) ‖ π_0(·|x, y_<t)) along responses y sampled from π,
averaged over the samples: an unbiased estimate of the sequence KL (its expectation equals that of the
sampled log-ratio log π(y) − log π_0(y)) that, unlike the log-ratio, is never negative. Both policies
are taken at the temperature the samples were drawn at (the distributions the sampler draws from,
before any top-p/top-k truncation), so that the estimate is of the KL between what was sampled.
"""

import jax
import jax.numpy as jnp

from nash_jax.core.losses import logits_from_hidden, tempered

_F32 = jnp.float32


def token_kl(logits, reference_logits, mask):
    """Σ_v p(v) (log p(v) − log q(v)) per position for p = softmax(logits), q = softmax(reference),
    exactly 0 where mask is false: [B, N, V] twice, [B, N] bool → [B, N] float32, each ≥ 0."""
    logp = jax.nn.log_softmax(logits.astype(_F32), axis=-1)
    logq = jax.nn.log_softmax(reference_logits.astype(_F32), axis=-1)
    kl = jnp.sum(jnp.exp(logp) * (logp - logq), axis=-1)
    # rounding can leave a hair below 0 where p ≈ q; the KL itself never is
    return jnp.where(mask.astype(bool), jnp.maximum(kl, 0.0), 0.0)


def chunked_token_kl(hidden, head, reference_hidden, reference_head, mask, *, chunk,
                     softcap=None, reference_softcap=None, temperature=1.0):
    """token_kl of the logits / temperature of (hidden [B, N, E], head [V, E]) and of the
    reference's, computed `chunk` positions at a time so that no [B, N, V] logits are live (forward
    only: a report's figure, never differentiated)."""
    b, n, _ = hidden.shape
    rows = b * n
    head, reference_head = head.astype(hidden.dtype), reference_head.astype(reference_hidden.dtype)

    def kl_of(h, h_ref, m):
        return token_kl(tempered(logits_from_hidden(h, head, softcap), temperature),
                        tempered(logits_from_hidden(h_ref, reference_head, reference_softcap),
                                 temperature), m)

    if rows <= chunk:
        return kl_of(hidden, reference_hidden, mask)
    count = -(-rows // chunk)

    def chunks(x):  # [B, N, ...] -> [count, chunk, ...], padded with zeros (masked out)
        x = x.reshape(rows, *x.shape[2:])
        x = jnp.pad(x, [(0, count * chunk - rows)] + [(0, 0)] * (x.ndim - 1))
        return x.reshape(count, chunk, *x.shape[1:])

    kl = jax.lax.map(lambda c: kl_of(c[0][None], c[1][None], c[2][None])[0],
                     (chunks(hidden), chunks(reference_hidden), chunks(mask.astype(bool))))
    return kl.reshape(count * chunk)[:rows].reshape(b, n)
