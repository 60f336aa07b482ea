"""The decoder family in Flax NNX: Llama 2/3, Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3 (text).

The variants differ only in flags of `LlamaConfig`: q/k/v (and o) biases for Qwen2 and Llama with
`attention_bias`, per-head q/k RMSNorm for Qwen3 and Gemma 3, the `llama3`/`linear` RoPE frequency
scalings, sliding-window layers, tied embeddings; and for Gemma: `(1 + w)` RMSNorms, norms on the
attention and MLP outputs too (four per layer), embeddings scaled by √hidden_size, GeGLU with tanh GELU,
the attention scale `query_pre_attn_scalar ** -0.5`, soft-capped attention and final logits
(`cap * tanh(x / cap)`, Gemma 2), and a separate rope base on the sliding-window layers (Gemma 3).
Numerics follow transformers: RMSNorm and softmax in fp32, matmuls in the compute dtype, logits returned
in fp32 (soft-capped in fp32). The norms, rope and MLP live in models/layers.py.

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
`max_window_layers`, Gemma's sliding/global pattern) share the scan: each carries the index of its
window, a `lax.switch` picks the attention program for it, and the index picks its rope table (one per
window, computed once per forward: Gemma 3's local and global bases).
"""

import math
from dataclasses import dataclass, field

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nash_jax import parallel
from nash_jax.core.losses import logits_from_hidden
from nash_jax.models import lora, quantised
from nash_jax.models.attention import attention, check_implementation, prefix_attention
from nash_jax.models.layers import (ACTIVATIONS, MLP, RMSNorm, apply_rope, rope_inverse_frequencies,
                                    rope_tables, stacked_param)
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
    hidden_act: str = "silu"  # one of layers.ACTIVATIONS (Gemma: gelu_pytorch_tanh)
    norm_plus_one: bool = False  # Gemma: every RMSNorm scales by (1 + w), in fp32
    sandwich_norms: bool = False  # Gemma: norms on the attention and MLP outputs as well
    scale_embeddings: bool = False  # Gemma: embeddings × √hidden_size (in the compute dtype)
    query_pre_attn_scalar: float | None = None  # Gemma: attention scale s**-0.5 (None: head_dim**-0.5)
    attn_logit_softcap: float | None = None  # Gemma 2: scores → cap * tanh(scores / cap)
    final_logit_softcap: float | None = None  # Gemma 2: logits → cap * tanh(logits / cap)
    local_rope_theta: float | None = None  # Gemma 3: rope base of the sliding layers (no scaling)
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
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act={self.hidden_act!r}; supported: {sorted(ACTIVATIONS)}")

    @property
    def attention_scale(self):
        return (self.query_pre_attn_scalar or self.head_dim) ** -0.5

    def window(self, layer):
        return self.sliding_windows[layer] if self.sliding_windows else None

    def window_groups(self):
        """(distinct windows in order of first use, per-layer index into them [L] int32)."""
        per_layer = [self.window(i) for i in range(self.num_layers)]
        distinct = list(dict.fromkeys(per_layer))
        return distinct, np.asarray([distinct.index(w) for w in per_layer], np.int32)


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
            self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps, "head_dim", pd, rngs, n, c.norm_plus_one)
            self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps, "head_dim", pd, rngs, n, c.norm_plus_one)

    def _project(self, x, name):
        dtype = x.dtype
        y = jnp.einsum("bte,ehd->bthd", x, quantised.kernel(self, f"{name}_proj").astype(dtype))
        y = y + lora.delta(self, f"{name}_proj", x, 1)
        if self.config.qkv_bias:
            y = y + getattr(self, f"{name}_bias")[...].astype(dtype)
        return y

    def __call__(self, x, context, window, cache=None, prefix=None):
        """context: what every layer shares (rope tables per window, segment ids, slots); window: an
        index into config.window_groups()[0] (int, or traced under scan); cache: None, or (keys, values
        [L, B, KV, S, D], layer, end): the new keys and values are written at (layer, end), attention
        reads the whole layer, and the updated cache is returned. prefix: None, or this layer's (keys,
        values) [B, KV, P, D] of a shared prefix that the rows continue (`Llama.hidden_states`)."""
        c = self.config
        q, k, v = (self._project(x, name) for name in ("q", "k", "v"))
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        cos, sin = (table[window] for table in context["rope"])  # this layer's window's rope
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
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
        kernel = self._kernel(context, prefix)
        branches = [lambda q, k, v, w=w: kernel(q, k, v, w) for w in c.window_groups()[0]]
        if len(branches) == 1 or isinstance(window, (int, np.integer)):
            out = branches[int(window) if len(branches) > 1 else 0](q, keys, values)
        else:  # layers with different windows in one scan: run the program of this layer's window
            out = jax.lax.switch(window, branches, q, keys, values)
        y = jnp.einsum("bthd,hde->bte", out, quantised.kernel(self, "o_proj").astype(x.dtype))
        y = y + lora.delta(self, "o_proj", out.astype(x.dtype), 2)
        if c.o_bias:
            y = y + self.o_bias[...].astype(x.dtype)
        return y, cache

    def _kernel(self, context, prefix):
        """(q, k, v, window) -> attention output: over the keys in hand (self-attention or the cache's
        layer), or over a shared prefix and the rows' own keys."""
        c = self.config
        scores = dict(scale=c.attention_scale, softcap=c.attn_logit_softcap)
        if prefix is not None:
            return lambda q, k, v, w: prefix_attention(
                q, k, v, *prefix, q_segment_ids=context["q_segment_ids"],
                prefix_segment_ids=context["prefix_segment_ids"], window=w, **scores)
        masking = {name: context[name] for name in ("q_segment_ids", "kv_segment_ids", "q_slots",
                                                    "kv_slots")}
        return lambda q, k, v, w: attention(q, k, v, window=w, implementation=c.attention, **masking,
                                            **scores)


class DecoderLayer(nnx.Module):
    """One decoder layer; built with `layers=L`, it holds all L layers' parameters stacked, and a
    slice of its state along the leading axis is one layer (what the scan body runs)."""

    def __init__(self, config, rngs, layers=None):
        def norm():
            return hidden_norm(config, rngs, layers)

        self.input_norm = norm()
        self.attn = Attention(config, rngs, layers)
        self.post_attn_norm = norm()  # the norm before the MLP (HF Llama's post_attention_layernorm)
        self.mlp = MLP(config, rngs, layers)
        self.sandwich = config.sandwich_norms
        if self.sandwich:  # Gemma: the attention's and the MLP's outputs are normed too
            self.attn_out_norm, self.mlp_out_norm = norm(), norm()

    def __call__(self, x, context, window, cache=None, prefix=None):
        attn_out, cache = self.attn(self.input_norm(x), context, window, cache, prefix)
        if self.sandwich:
            attn_out = self.attn_out_norm(attn_out)
        x = x + attn_out
        mlp_out = self.mlp(self.post_attn_norm(x))
        if self.sandwich:
            mlp_out = self.mlp_out_norm(mlp_out)
        return x + mlp_out, cache


def hidden_norm(config, rngs, layers=None):
    """An RMSNorm over the hidden size (stacked by layer when `layers` is set)."""
    return RMSNorm(config.hidden_size, config.rms_norm_eps, "norm", config.param_dtype, rngs, layers,
                   config.norm_plus_one)


class Llama(nnx.Module):
    def __init__(self, config, *, rngs):
        c, pd = config, config.param_dtype
        self.config = config
        self.embed = param(rngs, (c.vocab_size, c.hidden_size), ("vocab", "embed"), pd)
        self.layers = DecoderLayer(c, rngs, layers=c.num_layers)
        self.final_norm = hidden_norm(c, rngs)
        if not c.tie_word_embeddings:
            self.lm_head = param(rngs, (c.vocab_size, c.hidden_size), ("vocab", "embed"), pd)

    def __call__(self, tokens, positions=None, segment_ids=None, cache=None):
        """logits [B, T, V] float32 and the updated cache (None without one)."""
        hidden, cache = self.hidden_states(tokens, positions, segment_ids, cache)
        return self.logits(hidden), cache

    def logits(self, hidden):
        """fp32 logits [..., V] of hidden states [..., E]: the one place logits are made (the chunked
        log-probs of train/steps.py make theirs with the same function and the same soft-cap)."""
        return logits_from_hidden(hidden, self.unembedding(), self.config.final_logit_softcap)

    def unembedding(self):
        """The [V, E] output head (the embedding when tied), in the parameter dtype; logits from it
        are soft-capped by config.final_logit_softcap (see `logits`)."""
        return (self.embed if self.config.tie_word_embeddings else self.lm_head)[...]

    def embed_tokens(self, tokens):
        """[B, T, E] in the compute dtype; Gemma scales by √hidden_size, the factor rounded to the
        compute dtype first (as transformers rounds it to the weights' dtype)."""
        dtype = jnp.dtype(self.config.dtype)
        x = parallel.rows_sharded(jnp.take(self.embed[...], tokens, axis=0).astype(dtype))
        if self.config.scale_embeddings:
            x = x * jnp.asarray(np.float32(math.sqrt(self.config.hidden_size)), dtype)
        return x

    def hidden_states(self, tokens, positions=None, segment_ids=None, cache=None, prefix=None):
        """(final-normed hidden states [B, T, E] in the compute dtype, the updated cache or None).

        prefix: a KVCache of B' prompts filled to its length (left-padded), which the B = B'·R rows
        continue, prompt-major (rows b·R … b·R + R − 1 after prompt b; positions from the caller):
        each row attends to its prompt's keys in place, not to a copy (the LLM judge's pairs)."""
        c = self.config
        dtype = jnp.dtype(c.dtype)
        if segment_ids is None:
            segment_ids = jnp.ones(tokens.shape, jnp.int32)
        if positions is None:
            positions = positions_from_segments(segment_ids)
        inv_freq = np.stack([rope_inverse_frequencies(c, local=w is not None)
                             for w in c.window_groups()[0] or [None]])  # [windows, D/2]
        context = {"rope": rope_tables(positions, jnp.asarray(inv_freq), dtype),
                   "q_segment_ids": segment_ids, "kv_segment_ids": None, "q_slots": None,
                   "kv_slots": None}
        x = self.embed_tokens(tokens)
        t = tokens.shape[1]
        if prefix is not None:
            if cache is not None:
                raise ValueError("hidden_states takes a cache or a prefix, not both")
            context["prefix_segment_ids"] = prefix.segment_ids
            x, _ = self._run_layers(x, context, None, prefix=(prefix.keys, prefix.values))
            return self.final_norm(x), None
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

    def _run_layers(self, x, context, cache, prefix=None):
        """Every layer over x: scanned over the stacked parameters (or a Python loop), each layer
        rematerialised by the config's policy when there is no cache (remat only pays off under a
        backward pass; decoding runs layers plainly). prefix: None or (keys, values) [L, ...], each
        layer reading its own slice."""
        c = self.config
        if c.num_layers == 0:  # (a scan would still trace one layer of an empty stack)
            return x, None if cache is None else cache[:2]
        graphdef, state = nnx.split(self.layers)
        windows = c.window_groups()[1]

        def layer(carry, xs):
            x, kv = carry
            layer_state, index, window, layer_prefix = xs
            layer_cache = None if kv is None else (kv[0], kv[1], index, kv[2])
            x, layer_cache = nnx.merge(graphdef, layer_state)(x, context, window, layer_cache,
                                                               layer_prefix)
            return (x, None if kv is None else (*layer_cache[:2], kv[2])), None

        if cache is None and prefix is None:  # remat pays off only under a backward pass
            layer = rematerialised(layer, c.remat, prevent_cse=not c.scan_layers,
                                   quantised_base=quantised.is_quantised(self.layers))
        if c.scan_layers:
            xs = (state, jnp.arange(c.num_layers), jnp.asarray(windows), prefix)
            (x, kv), _ = jax.lax.scan(layer, (x, cache), xs)
        else:
            kv = cache
            for i in range(c.num_layers):
                per_layer = jax.tree.map(lambda a, i=i: a[i], (state, prefix))
                (x, kv), _ = layer((x, kv), (per_layer[0], i, int(windows[i]), per_layer[1]))
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
