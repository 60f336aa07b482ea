"""Training objectives of self-play preference optimisation, as pure jit-able JAX functions.

Every function computes in float32 whatever dtype its inputs come in, so bf16 logits from a model
still give fp32 log-probs and losses. Notation follows the papers:

  log-ratio   Δ(y) = log π_θ(y|x) − log π_ref(y|x)   (summed over response tokens)
  win rate    P̂(y) = P(y ≻ π_t | x), estimated as a row mean of a K×K preference matrix

SPPO: Wu et al. 2024 (arXiv 2405.00675). DPO: Rafailov et al. 2023. IPO: Azar et al. 2023.
Nash-MD-PG: Munos et al. 2023 (arXiv 2312.00886).
"""

from functools import partial

import jax
import jax.numpy as jnp

_F32 = jnp.float32


def logits_from_hidden(hidden, unembedding, softcap=None):
    """fp32 logits [..., V] = hidden [..., E] @ unembedding [V, E]ᵀ, the head cast to the hidden
    states' dtype for the matmul; with softcap (Gemma 2's final_logit_softcapping), soft-capped in fp32
    to softcap · tanh(logits / softcap). The model's forward and the chunked log-probs both call this."""
    logits = jnp.einsum("...e,ve->...v", hidden, unembedding.astype(hidden.dtype)).astype(_F32)
    if softcap is not None:
        logits = softcap * jnp.tanh(logits / softcap)
    return logits


def token_logprobs(logits, targets, mask):
    """log softmax(logits)[target] per position, exactly 0 where mask is false.

    logits [B, N, V], targets [B, N] int, mask [B, N] bool → [B, N] float32. Targets under a false
    mask may be anything (−100, padding ids): they are never used as indices.
    """
    logits = logits.astype(_F32)
    mask = mask.astype(bool)
    safe_targets = jnp.where(mask, targets, 0)
    picked = jnp.take_along_axis(logits, safe_targets[..., None], axis=-1)[..., 0]
    logp = picked - jax.nn.logsumexp(logits, axis=-1)
    return jnp.where(mask, logp, 0.0)


def chunked_token_logprobs(hidden, unembedding, targets, mask, *, chunk, softcap=None, temperature=1.0):
    """token_logprobs(logits_from_hidden(hidden, unembedding, softcap) / temperature, targets, mask)
    without the [B, N, V] fp32 logits (temperature: the sampler's, for log-probs of the distribution
    it drew from; 1.0 divides nothing).

    hidden [B, N, E] (compute dtype), unembedding [V, E], targets [B, N] int, mask [B, N] bool →
    [B, N] float32. The B·N positions are cut into chunks of `chunk` (the last padded, masked out)
    and a scan runs them one at a time: the forward keeps each chunk's log-probs and the log-sum-exp
    of its rows, and the backward recomputes one chunk's [chunk, V] logits at a time. The head is
    cast to the hidden states' dtype and the logits to fp32, as the model's own forward does, so
    values and gradients equal the full computation's (the gradient is written out by hand:
    _chunked_logprobs_bwd says why). B·N ≤ chunk is the full computation itself, bit for bit: one
    chunk has nothing to save, and small batches (the tests' tiny models) keep the arithmetic of
    the full logits on every mesh.
    """
    b, n, e = hidden.shape
    head = unembedding.astype(hidden.dtype)  # cast once, not in every chunk
    rows = b * n
    if chunk < 1:
        raise ValueError(f"chunk={chunk}; expected a positive number of positions per chunk")
    if temperature <= 0:
        raise ValueError(f"temperature={temperature}; expected a positive temperature")
    if rows <= chunk:
        return token_logprobs(tempered(logits_from_hidden(hidden, head, softcap), temperature),
                              targets, mask)
    count = -(-rows // chunk)
    pad = count * chunk - rows

    def chunks(x):  # [B, N, ...] -> [count, chunk, ...], padded with zeros (masked out)
        x = x.reshape(rows, *x.shape[2:])
        x = jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1))
        return x.reshape(count, chunk, *x.shape[1:])

    logp = _chunked_logprobs(chunks(hidden), head, chunks(targets), chunks(mask.astype(bool)),
                             softcap, float(temperature))
    return logp.reshape(count * chunk)[:rows].reshape(b, n)


def tempered(logits, temperature):
    """logits / temperature (the same array when temperature is 1)."""
    return logits if temperature == 1.0 else logits / temperature


@partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _chunked_logprobs(hidden, head, targets, mask, softcap, temperature):
    """[count, chunk] log-probs of hidden [count, chunk, E] under head [V, E] (both in the compute
    dtype), one chunk per scan step."""
    return _chunked_logprobs_fwd(hidden, head, targets, mask, softcap, temperature)[0]


def _chunked_logprobs_fwd(hidden, head, targets, mask, softcap, temperature):
    def one(_, xs):
        h, t, m = xs
        logits = tempered(logits_from_hidden(h, head, softcap), temperature)
        lse = jax.nn.logsumexp(logits, axis=-1)
        picked = jnp.take_along_axis(logits, jnp.where(m, t, 0)[:, None], axis=-1)[:, 0]
        return None, (jnp.where(m, picked - lse, 0.0), lse)

    _, (logp, lse) = jax.lax.scan(one, None, (hidden, targets, mask))
    return logp, (hidden, head, targets, mask, lse)


def _chunked_logprobs_bwd(softcap, temperature, residuals, g):
    """d log p_t / d logits = g_t (onehot(target_t) − softmax(logits_t)), with the softmax from the
    forward's log-sum-exp (no second max and sum over V) and the one-hot made by a comparison (no
    scatter into [chunk, V] zeros); through the temperature × 1/T and the soft-cap
    × (1 − (capped / cap)²). The head's
    gradient is accumulated transposed, [E, V] = hiddenᵀ · dlogits, and transposed once at the end:
    XLA:CPU runs the [V, E] = dlogitsᵀ · hidden form of that matmul 1.6x slower (one 1024-row chunk
    of a 49K vocabulary, E 576, one core: 548 ms against 348 ms)."""
    hidden, head, targets, mask, lse = residuals
    vocab = jnp.arange(head.shape[0])

    def one(d_head_t, xs):
        h, t, m, row_lse, row_g = xs
        capped = logits_from_hidden(h, head, softcap)
        row_g = jnp.where(m, row_g, 0.0)
        onehot = (vocab[None, :] == jnp.where(m, t, -1)[:, None]).astype(_F32)
        d_logits = row_g[:, None] * (onehot - jnp.exp(tempered(capped, temperature) - row_lse[:, None]))
        d_logits = tempered(d_logits, temperature)
        if softcap is not None:
            d_logits = d_logits * (1.0 - jnp.square(capped / softcap))
        d_logits = d_logits.astype(h.dtype)
        d_hidden = jnp.einsum("nv,ve->ne", d_logits, head)
        d_head_t = d_head_t + jnp.einsum("ne,nv->ev", h, d_logits).astype(_F32)
        return d_head_t, d_hidden

    d_head_t, d_hidden = jax.lax.scan(one, jnp.zeros(head.shape[::-1], _F32),
                                      (hidden, targets, mask, lse, g))
    return d_hidden, d_head_t.T.astype(head.dtype), None, None


_chunked_logprobs.defvjp(_chunked_logprobs_fwd, _chunked_logprobs_bwd)


def sequence_logprobs(logits, targets, mask):
    """Σ_t log π(target_t | ·) over positions where mask is true → [B] float32.

    The mask marks response tokens only; prompt and padding positions contribute exactly 0.
    """
    return jnp.sum(token_logprobs(logits, targets, mask), axis=-1)


def win_rates(pref):
    """P̂_i = mean_j P[i, j] → [..., K], for a [..., K, K] matrix with P[i, i] = 1/2.

    Comparing each sample with all K (itself included, a tie worth 1/2) is the paper's estimator of
    P(y_i ≻ π_t).
    """
    return jnp.mean(pref.astype(_F32), axis=-1)


def sppo_loss(logp, logp_anchor, win_rate, eta):
    """mean((log π_θ(y)/π_t(y) − η (P̂(y) − 1/2))²) over examples (SPPO, soft win-rate targets)."""
    log_ratio = logp.astype(_F32) - logp_anchor.astype(_F32)
    target = eta * (win_rate.astype(_F32) - 0.5)
    return jnp.mean((log_ratio - target) ** 2)


def _pair_log_ratios(logp_w, ref_w, logp_l, ref_l):
    """Winner's and loser's log-ratios Δ(y_w), Δ(y_l), in float32."""
    a = logp_w.astype(_F32) - ref_w.astype(_F32)
    b = logp_l.astype(_F32) - ref_l.astype(_F32)
    return a, b


def sppo_hard_loss(logp_w, ref_w, logp_l, ref_l, beta):
    """mean((Δ_w − 1/(2β))² + (Δ_l + 1/(2β))²): SPPO with hard labels (TRL's "sppo_hard").

    Equals two soft SPPO terms with η = 1/β and win rates 1 (winner) and 0 (loser); unlike DPO and
    IPO it pins each log-ratio separately, so the winner's likelihood must rise.
    """
    a, b = _pair_log_ratios(logp_w, ref_w, logp_l, ref_l)
    half_margin = 0.5 / beta
    return jnp.mean((a - half_margin) ** 2 + (b + half_margin) ** 2)


def dpo_loss(logp_w, ref_w, logp_l, ref_l, beta):
    """mean(−log σ(β (Δ_w − Δ_l))) (DPO, sigmoid loss)."""
    a, b = _pair_log_ratios(logp_w, ref_w, logp_l, ref_l)
    return jnp.mean(-jax.nn.log_sigmoid(beta * (a - b)))


def ipo_loss(logp_w, ref_w, logp_l, ref_l, beta):
    """mean((Δ_w − Δ_l − 1/(2β))²) on summed (not length-averaged) log-ratios (IPO).

    This is the form of the IPO paper and of the official SPPO repository's baseline; TRL divides
    each log-ratio by its token count first.
    """
    a, b = _pair_log_ratios(logp_w, ref_w, logp_l, ref_l)
    return jnp.mean((a - b - 0.5 / beta) ** 2)


def nash_md_pg_loss(logp, logp_ref, pref_vs_opponent, tau):
    """Surrogate of the regularised REINFORCE step of Nash-MD-PG, averaged over examples.

    Its gradient is −mean((P(y ≻ y') − 1/2 − τ·sg(log π_θ(y) − log μ(y))) ∇ log π_θ(y)), y ~ π_θ,
    y' ~ the geometric mixture of π_θ and μ. The stop-gradient on the log-ratio makes the KL term
    the score-function estimator of ∇ KL(π_θ ‖ μ); without it the KL gradient is wrong.
    """
    logp = logp.astype(_F32)
    log_ratio = jax.lax.stop_gradient(logp - logp_ref.astype(_F32))
    advantage = jax.lax.stop_gradient(pref_vs_opponent.astype(_F32) - 0.5 - tau * log_ratio)
    return -jnp.mean(advantage * logp)
