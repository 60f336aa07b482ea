"""Attention behind one function: masks from segment ids and slots, GQA, sliding windows, KV caches.

`attention(q, k, v, q_segment_ids=..., ...)` is the only place that knows how a mask is made and which
kernel runs it:

  reference  the dense masked path (fp32 scores [B, KV, G, T, S]); the one the tests compare against
  xla        jax.nn.dot_product_attention(implementation="xla")
  cudnn      jax.nn.dot_product_attention(implementation="cudnn"): flash attention on NVIDIA GPUs
             (bf16/fp16 only; the mask goes in as a bias)
  splash     Pallas splash attention on TPU (self-attention without a cache; needs a TPU)
  auto       cudnn on GPU and splash on TPU where they apply (half-precision self-attention), else
             xla on GPU/TPU; on CPU the reference path (forward+backward of B 4 × T 256, 8 heads
             over 2 KV heads, fp32: 1.6x less CPU time than xla)

Masking: a query attends to a key when both have the same segment id, the key is not padding
(segment 0), the key's slot is not after the query's slot (causal), and, with a sliding window,
query slot − key slot < window. Slots are indices in the sequence buffer: for self-attention they are
0 .. T−1 for both; with a KV cache the T new queries sit at slots end .. end+T−1 and the keys are the
whole cache 0 .. S−1 (empty slots have segment 0). A padding query (segment 0) has no allowed key; its
output is finite but meaningless (zero on the fused paths). A window w lets a query see itself and the
w − 1 keys before it: transformers' sliding window (Mistral, Qwen2, Gemma 2/3:
`kv_idx > q_idx - sliding_window`), and splash's LocalMask (w − 1, 0).

Scores are q·k × scale (default head_dim ** -0.5; Gemma: query_pre_attn_scalar ** -0.5), soft-capped
to cap · tanh(scores / cap) before the mask when `softcap` is set (Gemma 2). jax.nn.dot_product_attention
has no soft-cap, so a soft-capped attention runs the reference path on CPU and GPU (splash on TPU has
its own).
"""

import math

import jax
import jax.numpy as jnp

IMPLEMENTATIONS = ("reference", "xla", "cudnn", "splash", "auto")
_MASKED = -1e30  # finite, so that a fully masked (padding) query row stays NaN-free


def check_implementation(name):
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"attention implementation {name!r} is not one of {IMPLEMENTATIONS}")
    return name


def attention(q, k, v, *, q_segment_ids, kv_segment_ids=None, q_slots=None, kv_slots=None,
              window=None, implementation="reference", scale=None, softcap=None):
    """Grouped-query attention → [B, T, H, D] in q's dtype.

    q [B, T, H, D]; k, v [B, KV, S, D] (head-major, the KV cache's layout); q_segment_ids [B, T];
    kv_segment_ids [B, S]; q_slots [T], kv_slots [S] int. Leave kv_segment_ids and both slots None for
    self-attention over the queries' own tokens (S = T). window: static int or None; scale: of the
    scores (None: head_dim ** -0.5); softcap: static float or None.
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    self_attention = kv_segment_ids is None
    if self_attention:
        if q_slots is not None or kv_slots is not None:
            raise ValueError("self-attention takes no slots; pass kv_segment_ids, q_slots and "
                             "kv_slots together for attention over a cache")
        kv_segment_ids = q_segment_ids
        q_slots = kv_slots = jnp.arange(q.shape[1])
    elif q_slots is None or kv_slots is None:
        raise ValueError("attention over a cache needs q_slots [T] and kv_slots [S]")
    kind = _resolve(check_implementation(implementation), q.dtype, self_attention)
    if kind == "splash":
        out = _splash(q, k, v, q_segment_ids, window, scale, softcap)
    else:
        mask = attention_mask(q_segment_ids, kv_segment_ids, q_slots, kv_slots, window)
        if kind == "reference" or softcap is not None:
            return attend(q, k, v, mask, scale, softcap)
        out = jax.nn.dot_product_attention(q, k.transpose(0, 2, 1, 3).astype(q.dtype),
                                           v.transpose(0, 2, 1, 3).astype(q.dtype),
                                           mask=mask[:, None], scale=scale, implementation=kind)
    return jnp.where((q_segment_ids > 0)[:, :, None, None], out, 0).astype(q.dtype)


def _resolve(name, dtype, self_attention):
    platform = jax.default_backend()
    if name == "splash" and platform != "tpu":
        raise ValueError(f"attention implementation 'splash' runs on TPU only; this backend is "
                         f"{platform!r} (use 'auto', 'xla' or 'reference')")
    if name == "splash" and not self_attention:
        return "xla"  # decode steps over a cache: splash's kernel has no query offset
    if name != "auto":
        return name
    half = jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16)
    if platform == "gpu":
        return "cudnn" if half and self_attention else "xla"
    if platform == "tpu":
        return "splash" if self_attention else "xla"
    return "reference"


def attention_mask(query_segments, key_segments, query_slots, key_slots, window):
    """bool [B, T, S]: same segment, key not padding, causal, and within the sliding window.

    Segments are [B, T] / [B, S]; slots [T] / [S] are positions in the sequence buffer.
    """
    allowed = ((query_segments[:, :, None] == key_segments[:, None, :])
               & (key_segments[:, None, :] > 0)
               & (key_slots[None, None, :] <= query_slots[None, :, None]))
    if window is not None:
        allowed &= query_slots[None, :, None] - key_slots[None, None, :] < window
    return allowed


def attend(q, k, v, mask, scale=None, softcap=None):
    """The reference: q [B, T, H, D]; k, v [B, KV, S, D]; mask bool [B, T, S]; scores q·k × scale
    (default head_dim ** -0.5), soft-capped in fp32 when softcap is set.

    The G query heads that share a KV head are stacked along the query axis, so both matmuls are
    plain batched matmuls over (B, KV) on head-major keys: no transposes of the (cached) keys, and on
    XLA:CPU about 1.3x faster forward+backward than a 5-d einsum over [B, T, KV, G, D].
    """
    b, t, h, d = q.shape
    kv, s = k.shape[1], k.shape[2]
    g = h // kv
    k, v = k.astype(q.dtype), v.astype(q.dtype)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    q = (q * scale).reshape(b, t, kv, g, d).transpose(0, 2, 3, 1, 4)
    q = q.reshape(b, kv, g * t, d)
    scores = jnp.einsum("bkqd,bksd->bkqs", q, k).reshape(b, kv, g, t, s)
    probs = _probabilities(scores, mask[:, None, None], softcap).astype(v.dtype)
    out = jnp.einsum("bkqs,bksd->bkqd", probs.reshape(b, kv, g * t, s), v)
    return out.reshape(b, kv, g, t, d).transpose(0, 3, 1, 2, 4).reshape(b, t, h, d)


def _probabilities(scores, mask, softcap):
    """softmax over the last axis of fp32 scores, soft-capped first, masked keys at _MASKED."""
    scores = scores.astype(jnp.float32)
    if softcap is not None:
        scores = softcap * jnp.tanh(scores / softcap)
    return jax.nn.softmax(jnp.where(mask, scores, _MASKED), axis=-1)


def prefix_attention(q, k, v, prefix_k, prefix_v, *, q_segment_ids, prefix_segment_ids, window=None,
                     scale=None, softcap=None):
    """Rows that continue a shared prefix, attending to it without a copy of it per row → [N, T, H, D].

    N = B·R rows, prompt-major: rows b·R … b·R + R − 1 continue prefix b. q [N, T, H, D] and the rows'
    own k, v [N, KV, T, D]; prefix_k, prefix_v [B, KV, P, D] with prefix_segment_ids [B, P], filled to
    the end (left-padded), so that each row's token 0 sits at slot P. A query attends to the real prefix
    keys of its segment and to its own earlier tokens of its segment (within the window): the mask of
    `attention` over each row's own copy of the prefix, and the same numbers (the reference path). The
    prefix scores of a prompt's R rows are one matmul against its keys.
    """
    n, t, h, d = q.shape
    b, kv, p = prefix_k.shape[:3]
    r, g = n // b, h // kv
    scale = d ** -0.5 if scale is None else scale
    q = (q * scale).reshape(b, r, t, kv, g, d).transpose(0, 3, 1, 4, 2, 5)  # [B, KV, R, G, T, D]
    k = k.reshape(b, r, kv, t, d).transpose(0, 2, 1, 3, 4).astype(q.dtype)  # [B, KV, R, T, D]
    v = v.reshape(b, r, kv, t, d).transpose(0, 2, 1, 3, 4).astype(q.dtype)
    prefix_k, prefix_v = prefix_k.astype(q.dtype), prefix_v.astype(q.dtype)
    scores = jnp.concatenate([jnp.einsum("bkrgtd,bkpd->bkrgtp", q, prefix_k),
                              jnp.einsum("bkrgtd,bkrsd->bkrgts", q, k)], axis=-1)
    slots = jnp.arange(t)
    prefix_segments = jnp.repeat(prefix_segment_ids, r, axis=0)[:, None, :]  # [N, 1, P]
    to_prefix = (prefix_segments == q_segment_ids[:, :, None]) & (prefix_segments > 0)
    if window is not None:
        to_prefix &= (p + slots)[:, None] - jnp.arange(p)[None, :] < window
    to_own = attention_mask(q_segment_ids, q_segment_ids, slots, slots, window)
    mask = jnp.concatenate([to_prefix, to_own], axis=-1).reshape(b, 1, r, 1, t, p + t)
    probs = _probabilities(scores, mask, softcap).astype(v.dtype)
    out = (jnp.einsum("bkrgtp,bkpd->bkrgtd", probs[..., :p], prefix_v)
           + jnp.einsum("bkrgts,bkrsd->bkrgtd", probs[..., p:], v))
    out = out.transpose(0, 2, 4, 1, 3, 5).reshape(n, t, h, d)
    return jnp.where((q_segment_ids > 0)[:, :, None, None], out, 0).astype(q.dtype)


def _splash(q, k, v, segment_ids, window, scale, softcap):
    """Pallas splash attention (TPU): one multi-query kernel per KV head, vmapped over batch and KV
    heads; segment ids separate sequences and padding, the mask is causal (and local)."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as kernels
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

    b, t, h, d = q.shape
    kv = k.shape[1]
    g = h // kv
    shape = (t, t)
    one = masks.CausalMask(shape) if window is None else masks.LocalMask(shape, (window - 1, 0), 0)
    kernel = kernels.make_splash_mqa_single_device(masks.MultiHeadMask([one] * g),
                                                   attn_logits_soft_cap=softcap)
    segments = kernels.SegmentIds(q=segment_ids, kv=segment_ids)
    q = (q * scale).reshape(b, t, kv, g, d).transpose(0, 2, 3, 1, 4)  # [B, KV, G, T, D]

    def one_head(q, k, v, seg):
        return kernel(q, k.astype(q.dtype), v.astype(q.dtype), segment_ids=seg)

    per_batch = jax.vmap(one_head, in_axes=(0, 0, 0, None))
    out = jax.vmap(per_batch, in_axes=(0, 0, 0, kernels.SegmentIds(q=0, kv=0)))(q, k, v, segments)
    return out.transpose(0, 3, 1, 2, 4).reshape(b, t, h, d)

