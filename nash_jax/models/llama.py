"""The Llama family of decoders in Flax NNX: Llama 2/3, Mistral, Qwen2, Qwen3.

The variants differ only in flags of `LlamaConfig`: q/k/v (and o) biases for Qwen2 and Llama with
`attention_bias`, per-head q/k RMSNorm for Qwen3, the `llama3` RoPE frequency scaling, sliding-window
layers, tied embeddings. Numerics follow transformers: RMSNorm and softmax in fp32, matmuls in the
compute dtype, logits returned in fp32.

Forward: `model(tokens [B, T], positions [B, T], segment_ids [B, T], cache=None) -> (logits, cache)`,
which is `hidden_states(...)` (the final-normed hidden states and the cache) followed by the
unembedding. Segment id 0 marks padding; a token attends to earlier tokens of its own segment, so left
padding, right padding and packed sequences all work. With a `KVCache`, the T new tokens are written
at slots `cache.end .. cache.end + T - 1` and attend to everything already in the cache: one call with
the whole prompt is the prefill, calls with T = 1 are decode steps.

Layers are stored stacked: every parameter of `model.layers` has a leading layer axis (logical name
"layers"), and the forward runs one layer's program under `jax.lax.scan`, so that compile time does not
grow with depth. `scan_layers=False` runs the same stacked parameters in a Python loop (one program per
layer: for the compile benchmark and the parity tests). Layers whose sliding windows differ (Qwen2's
`max_window_layers`) share the scan: each carries the index of its window, and a `lax.switch` picks the
attention program for it.
"""

import math
from dataclasses import dataclass, field

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nash_jax.models.attention import attention, check_implementation
from nash_jax.models.params import param
from nash_jax.models.remat import check_remat, rematerialised

@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: tuple = ()  # sorted (key, value) items of transformers' rope dict (hashable)
    tie_word_embeddings: bool = False
    qkv_bias: bool = False  # Qwen2; Llama's attention_bias sets this and o_bias
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False  # Qwen3
    sliding_windows: tuple = ()  # per layer: window length or None; empty = full attention everywhere
    dtype: str = "float32"  # compute dtype
    param_dtype: str = "float32"
    remat: str = "none"  # one of REMAT_POLICIES, per layer; True/False are read as "full"/"none"
    scan_layers: bool = True  # False: a Python loop over layers (compiles each layer separately)
    attention: str = "auto"  # see models/attention.py
    hf_config: dict = field(default_factory=dict, compare=False, repr=False)  # config.json as read

    def __post_init__(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} is not a multiple of "
                             f"num_kv_heads={self.num_kv_heads}")
        if self.sliding_windows and len(self.sliding_windows) != self.num_layers:
            raise ValueError(f"{len(self.sliding_windows)} sliding windows for {self.num_layers} layers")
        if isinstance(self.remat, bool):  # the old flag: per-layer full remat or none
            object.__setattr__(self, "remat", "full" if self.remat else "none")
        check_remat(self.remat, "Llama")
        check_implementation(self.attention)

    def window(self, layer):
        return self.sliding_windows[layer] if self.sliding_windows else None

    def window_groups(self):
        """(distinct windows in order of first use, per-layer index into them [L] int32)."""
        per_layer = [self.window(i) for i in range(self.num_layers)]
        distinct = list(dict.fromkeys(per_layer))
        return distinct, np.asarray([distinct.index(w) for w in per_layer], np.int32)


def rope_inverse_frequencies(config):
    """[head_dim / 2] float32 inverse frequencies, with transformers' `llama3`/`linear` scaling."""
    dim = config.head_dim
    inv_freq = 1.0 / (np.float32(config.rope_theta) ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    scaling = dict(config.rope_scaling)
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv_freq.astype(np.float32)
    if kind == "linear":
        return (inv_freq / scaling["factor"]).astype(np.float32)
    if kind == "llama3":
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_context = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
        smooth = (old_context / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old_context / high) & ~(wavelen > old_context / low)
        return np.where(medium, smoothed, scaled).astype(np.float32)
    raise ValueError(f"unsupported rope_type {kind!r}; supported: default, linear, llama3")


def rope_tables(positions, inv_freq, dtype):
    """cos, sin [B, T, 1, D/2] for positions [B, T]; computed once per forward, shared by layers."""
    angles = positions.astype(jnp.float32)[..., None, None] * inv_freq
    return jnp.cos(angles).astype(dtype), jnp.sin(angles).astype(dtype)


def apply_rope(x, cos, sin):
    """Rotate x [B, T, H, D] (transformers' rotate-half convention: pairs (i, i + D/2))."""
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def positions_from_segments(segment_ids):
    """Positions 0, 1, 2, ... counted within each row's real tokens (padding gets 0)."""
    real = segment_ids > 0
    return jnp.where(real, jnp.cumsum(real, axis=-1) - 1, 0).astype(jnp.int32)


@flax.struct.dataclass
class KVCache:
    """Keys and values of every layer for S slots, filled left to right.

    keys, values [L, B, kv_heads, S, head_dim] (head-major: attention reads them without a
    transpose); segment_ids [B, S] (0 = empty or padding);
    end: the next slot to write (a scalar shared by the batch: prompts are left-padded).
    """

    keys: jax.Array
    values: jax.Array
    segment_ids: jax.Array
    end: jax.Array

    @classmethod
    def create(cls, config, batch, length, dtype=None):
        dtype = jnp.dtype(dtype or config.dtype)
        shape = (config.num_layers, batch, config.num_kv_heads, length, config.head_dim)
        return cls(keys=jnp.zeros(shape, dtype), values=jnp.zeros(shape, dtype),
                   segment_ids=jnp.zeros((batch, length), jnp.int32), end=jnp.zeros((), jnp.int32))

    @property
    def length(self):
        return self.keys.shape[3]


def stacked_param(layers, rngs, shape, axes, dtype, init="normal"):
    """A parameter with a leading layer axis when `layers` is set (the stacked layout of scanned
    layers), a plain one otherwise."""
    if layers is None:
        return param(rngs, shape, axes, dtype, init)
    return param(rngs, (layers, *shape), ("layers", *axes), dtype, init)


class RMSNorm(nnx.Module):
    def __init__(self, dim, eps, axis_name, param_dtype, rngs, layers=None):
        self.weight = stacked_param(layers, rngs, (dim,), (axis_name,), param_dtype, init="ones")
        self.eps = eps

    def __call__(self, x):
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return self.weight[...].astype(x.dtype) * normed.astype(x.dtype)


class Attention(nnx.Module):
    def __init__(self, config, rngs, layers=None):
        c, pd, n = config, config.param_dtype, layers
        self.config = config
        self.q_proj = stacked_param(n, rngs, (c.hidden_size, c.num_heads, c.head_dim),
                                    ("embed", "heads", "head_dim"), pd)
        self.k_proj = stacked_param(n, rngs, (c.hidden_size, c.num_kv_heads, c.head_dim),
                                    ("embed", "kv_heads", "head_dim"), pd)
        self.v_proj = stacked_param(n, rngs, (c.hidden_size, c.num_kv_heads, c.head_dim),
                                    ("embed", "kv_heads", "head_dim"), pd)
        self.o_proj = stacked_param(n, rngs, (c.num_heads, c.head_dim, c.hidden_size),
                                    ("heads", "head_dim", "embed"), pd)
        if c.qkv_bias:
            self.q_bias = stacked_param(n, rngs, (c.num_heads, c.head_dim), ("heads", "head_dim"), pd,
                                        "zeros")
            self.k_bias = stacked_param(n, rngs, (c.num_kv_heads, c.head_dim),
                                        ("kv_heads", "head_dim"), pd, "zeros")
            self.v_bias = stacked_param(n, rngs, (c.num_kv_heads, c.head_dim),
                                        ("kv_heads", "head_dim"), pd, "zeros")
        if c.o_bias:
            self.o_bias = stacked_param(n, rngs, (c.hidden_size,), ("embed",), pd, "zeros")
        if c.qk_norm:
            self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps, "head_dim", pd, rngs, n)
            self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps, "head_dim", pd, rngs, n)

    def _project(self, x, name):
        dtype = x.dtype
        y = jnp.einsum("bte,ehd->bthd", x, getattr(self, f"{name}_proj")[...].astype(dtype))
        if self.config.qkv_bias:
            y = y + getattr(self, f"{name}_bias")[...].astype(dtype)
        return y

    def __call__(self, x, context, window, cache=None):
        """context: what every layer shares (rope tables, segment ids, slots); window: an index into
        config.window_groups()[0] (int, or traced under scan); cache: None, or (keys, values
        [L, B, KV, S, D], layer, end): the new keys and values are written at (layer, end), attention
        reads the whole layer, and the updated cache is returned."""
        c = self.config
        q, k, v = (self._project(x, name) for name in ("q", "k", "v"))
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, *context["rope"]), apply_rope(k, *context["rope"])
        k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [B, KV, T, D]
        if cache is None:
            keys, values = k, v
        else:
            all_keys, all_values, layer, end = cache
            at = (layer, 0, 0, end, 0)
            all_keys = jax.lax.dynamic_update_slice(all_keys, k[None].astype(all_keys.dtype), at)
            all_values = jax.lax.dynamic_update_slice(all_values, v[None].astype(all_values.dtype), at)
            keys, values = all_keys[layer], all_values[layer]
            cache = (all_keys, all_values, layer, end)
        masking = {name: context[name] for name in ("q_segment_ids", "kv_segment_ids", "q_slots",
                                                    "kv_slots")}
        windows = c.window_groups()[0]
        branches = [lambda q, k, v, w=w: attention(q, k, v, window=w, implementation=c.attention,
                                                    **masking) for w in windows]
        if len(branches) == 1 or isinstance(window, (int, np.integer)):
            out = branches[int(window) if len(branches) > 1 else 0](q, keys, values)
        else:  # layers with different windows in one scan: run the program of this layer's window
            out = jax.lax.switch(window, branches, q, keys, values)
        y = jnp.einsum("bthd,hde->bte", out, self.o_proj[...].astype(x.dtype))
        if c.o_bias:
            y = y + self.o_bias[...].astype(x.dtype)
        return y, cache


class MLP(nnx.Module):
    def __init__(self, config, rngs, layers=None):
        c, pd, n = config, config.param_dtype, layers
        self.gate_proj = stacked_param(n, rngs, (c.hidden_size, c.intermediate_size), ("embed", "mlp"),
                                       pd)
        self.up_proj = stacked_param(n, rngs, (c.hidden_size, c.intermediate_size), ("embed", "mlp"),
                                     pd)
        self.down_proj = stacked_param(n, rngs, (c.intermediate_size, c.hidden_size),
                                       ("mlp", "embed"), pd)
        if c.mlp_bias:
            self.gate_bias = stacked_param(n, rngs, (c.intermediate_size,), ("mlp",), pd, "zeros")
            self.up_bias = stacked_param(n, rngs, (c.intermediate_size,), ("mlp",), pd, "zeros")
            self.down_bias = stacked_param(n, rngs, (c.hidden_size,), ("embed",), pd, "zeros")
        self.bias = c.mlp_bias

    def __call__(self, x):
        dtype = x.dtype

        def linear(inputs, name):
            y = inputs @ getattr(self, f"{name}_proj")[...].astype(dtype)
            return y + getattr(self, f"{name}_bias")[...].astype(dtype) if self.bias else y

        return linear(jax.nn.silu(linear(x, "gate")) * linear(x, "up"), "down")


class DecoderLayer(nnx.Module):
    """One decoder layer; built with `layers=L`, it holds all L layers' parameters stacked, and a
    slice of its state along the leading axis is one layer (what the scan body runs)."""

    def __init__(self, config, rngs, layers=None):
        pd = config.param_dtype
        self.input_norm = RMSNorm(config.hidden_size, config.rms_norm_eps, "norm", pd, rngs, layers)
        self.attn = Attention(config, rngs, layers)
        self.post_attn_norm = RMSNorm(config.hidden_size, config.rms_norm_eps, "norm", pd, rngs,
                                      layers)
        self.mlp = MLP(config, rngs, layers)

    def __call__(self, x, context, window, cache=None):
        attn_out, cache = self.attn(self.input_norm(x), context, window, cache)
        x = x + attn_out
        return x + self.mlp(self.post_attn_norm(x)), cache


class Llama(nnx.Module):
    def __init__(self, config, *, rngs):
        c, pd = config, config.param_dtype
        self.config = config
        self.embed = param(rngs, (c.vocab_size, c.hidden_size), ("vocab", "embed"), pd)
        self.layers = DecoderLayer(c, rngs, layers=c.num_layers)
        self.final_norm = RMSNorm(c.hidden_size, c.rms_norm_eps, "norm", pd, rngs)
        if not c.tie_word_embeddings:
            self.lm_head = param(rngs, (c.vocab_size, c.hidden_size), ("vocab", "embed"), pd)

    def __call__(self, tokens, positions=None, segment_ids=None, cache=None):
        """logits [B, T, V] float32 and the updated cache (None without one)."""
        hidden, cache = self.hidden_states(tokens, positions, segment_ids, cache)
        head = self.unembedding().astype(hidden.dtype)
        return jnp.einsum("bte,ve->btv", hidden, head).astype(jnp.float32), cache

    def unembedding(self):
        """The [V, E] output head (the embedding when tied), in the parameter dtype."""
        return (self.embed if self.config.tie_word_embeddings else self.lm_head)[...]

    def hidden_states(self, tokens, positions=None, segment_ids=None, cache=None):
        """(final-normed hidden states [B, T, E] in the compute dtype, the updated cache or None)."""
        c = self.config
        dtype = jnp.dtype(c.dtype)
        if segment_ids is None:
            segment_ids = jnp.ones(tokens.shape, jnp.int32)
        if positions is None:
            positions = positions_from_segments(segment_ids)
        context = {"rope": rope_tables(positions, jnp.asarray(rope_inverse_frequencies(c)), dtype),
                   "q_segment_ids": segment_ids, "kv_segment_ids": None, "q_slots": None,
                   "kv_slots": None}
        x = jnp.take(self.embed[...], tokens, axis=0).astype(dtype)
        t = tokens.shape[1]
        if cache is None:
            x, _ = self._run_layers(x, context, None)
            return self.final_norm(x), None
        _check_cache_room(cache, t)
        key_segments = jax.lax.dynamic_update_slice(cache.segment_ids, segment_ids.astype(jnp.int32),
                                                    (0, cache.end))
        context.update(kv_segment_ids=key_segments, q_slots=cache.end + jnp.arange(t),
                       kv_slots=jnp.arange(cache.length))
        x, (keys, values) = self._run_layers(x, context, (cache.keys, cache.values, cache.end))
        return self.final_norm(x), KVCache(keys=keys, values=values, segment_ids=key_segments,
                                           end=cache.end + t)

    def _run_layers(self, x, context, cache):
        """Every layer over x: scanned over the stacked parameters (or a Python loop), each layer
        rematerialised by the config's policy when there is no cache (remat only pays off under a
        backward pass; decoding runs layers plainly)."""
        c = self.config
        if c.num_layers == 0:  # (a scan would still trace one layer of an empty stack)
            return x, None if cache is None else cache[:2]
        graphdef, state = nnx.split(self.layers)
        windows = c.window_groups()[1]

        def layer(carry, xs):
            x, kv = carry
            layer_state, index, window = xs
            layer_cache = None if kv is None else (kv[0], kv[1], index, kv[2])
            x, layer_cache = nnx.merge(graphdef, layer_state)(x, context, window, layer_cache)
            return (x, None if kv is None else (*layer_cache[:2], kv[2])), None

        if cache is None:  # remat pays off only under a backward pass, not when decoding
            layer = rematerialised(layer, c.remat, prevent_cse=not c.scan_layers)
        if c.scan_layers:
            xs = (state, jnp.arange(c.num_layers), jnp.asarray(windows))
            (x, kv), _ = jax.lax.scan(layer, (x, cache), xs)
        else:
            kv = cache
            for i in range(c.num_layers):
                layer_state = jax.tree.map(lambda a, i=i: a[i], state)
                (x, kv), _ = layer((x, kv), (layer_state, i, int(windows[i])))
        return x, None if kv is None else kv[:2]


def _check_cache_room(cache, new_tokens):
    """Writing past the end would be clamped silently by dynamic_update_slice; refuse it when the
    fill level is known (outside jit). The sampler sizes its caches so this never triggers inside."""
    try:
        end = int(cache.end)
    except (jax.errors.ConcretizationTypeError, TypeError):
        return
    if end + new_tokens > cache.length:
        raise ValueError(f"KV cache holds {cache.length} slots, {end} are filled; "
                         f"{new_tokens} more tokens do not fit")
