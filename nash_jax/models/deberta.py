"""DeBERTa-v2/v3 encoder in Flax NNX: the backbone of the PairRM judge.

Disentangled attention as transformers' `DebertaV2Model` computes it: content-to-content,
content-to-position (c2p) and position-to-content (p2c) scores, keys shared between content and
relative positions (`share_att_key`), log-bucketed relative positions, LayerNorm on the relative
embeddings, post-LN layers, exact GELU, LayerNorm eps 1e-7. Only relative positions: no absolute
position or token-type embeddings (PairRM's configuration); other options are refused by name.

The layers are stored stacked (each parameter has a leading layer axis) and run by `lax.scan`, so a
program holds one layer whatever the depth; `scan_layers=False` runs the same arrays in a Python loop
(the reference the scan is tested against). Checkpoints map through `models/loading.py`'s key table.
"""

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nash_jax.models.config_values import check_divides, check_positive_ints, check_positive_numbers
from nash_jax.models.loading import COPY, TRANSPOSE, ArraySource, KeyMap, Rule, load_into
from nash_jax.models.params import param
from nash_jax.models.remat import check_remat, rematerialised


@dataclass(frozen=True)
class DebertaConfig:
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    layer_norm_eps: float = 1e-7
    max_relative_positions: int = 512
    position_buckets: int = 256  # ≤ 0: no log buckets, relative positions clipped at the span
    c2p: bool = True
    p2c: bool = True
    dtype: str = "float32"
    param_dtype: str = "float32"
    scan_layers: bool = True  # run the stacked layers with lax.scan (False: a Python loop, inlined)
    remat: str = "none"  # per layer, under a backward pass: one of models/remat.py REMAT_POLICIES

    def __post_init__(self):
        if self.remat is None:
            object.__setattr__(self, "remat", "none")
        check_remat(self.remat, "DeBERTa")

    @property
    def head_dim(self):
        return self.hidden_size // self.num_heads

    @property
    def span(self):
        """Half the number of relative-embedding rows (att_span in transformers)."""
        return self.position_buckets if self.position_buckets > 0 else self.max_relative_positions


def config_from_hf(hf, *, dtype="float32", param_dtype=None, source="config.json", scan_layers=True,
                   remat=None):
    """DebertaConfig from a transformers DebertaV2Config-style config.json dict."""
    if hf.get("model_type") not in ("deberta-v2", "deberta_v2"):
        raise ValueError(f"{source}: model_type={hf.get('model_type')!r}; expected 'deberta-v2'")
    check_sizes(hf, source)
    unsupported = {
        "relative_attention": (hf.get("relative_attention", False) is not True, "must be true"),
        "share_att_key": (hf.get("share_att_key", False) is not True, "must be true"),
        "position_biased_input": (hf.get("position_biased_input", True) is not False,
                                  "must be false (no absolute position embeddings)"),
        "type_vocab_size": (hf.get("type_vocab_size", 0) not in (0, None), "must be 0"),
        "conv_kernel_size": (hf.get("conv_kernel_size", 0) not in (0, None), "no conv layer"),
        "embedding_size": (hf.get("embedding_size") not in (None, hf["hidden_size"]),
                           "must equal hidden_size"),
        "hidden_act": (hf.get("hidden_act", "gelu") != "gelu", "must be 'gelu'"),
        "norm_rel_ebd": ("layer_norm" not in str(hf.get("norm_rel_ebd", "none")),
                         "must include layer_norm"),
    }
    problems = [f"{key}={hf.get(key)!r} ({why})" for key, (bad, why) in unsupported.items() if bad]
    if problems:
        raise ValueError(f"{source}: unsupported DeBERTa options: {'; '.join(problems)}")
    att_type = hf.get("pos_att_type") or []
    att_type = [t.strip() for t in (att_type.split("|") if isinstance(att_type, str) else att_type)]
    max_relative = hf.get("max_relative_positions", -1)
    return DebertaConfig(
        vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
        num_layers=hf["num_hidden_layers"], num_heads=hf["num_attention_heads"],
        intermediate_size=hf["intermediate_size"], layer_norm_eps=hf.get("layer_norm_eps", 1e-7),
        max_relative_positions=max_relative if max_relative >= 1 else hf["max_position_embeddings"],
        position_buckets=hf.get("position_buckets", -1), c2p="c2p" in att_type, p2c="p2c" in att_type,
        dtype=dtype, param_dtype=param_dtype or dtype, scan_layers=scan_layers, remat=remat)


def check_sizes(hf, source):
    """Every size and count DeBERTa reads is a positive integer, and the heads divide the width."""
    relative = hf.get("max_relative_positions", -1)
    check_positive_ints(hf, source, ("vocab_size", "hidden_size", "num_hidden_layers",
                                     "num_attention_heads", "intermediate_size")
                        + (("max_position_embeddings",) if not (isinstance(relative, int)
                                                                and relative >= 1) else ()))
    check_positive_numbers(hf, source, ("layer_norm_eps",))
    for key in ("max_relative_positions", "position_buckets"):  # ≤ 0 means "not used"
        if not isinstance(hf.get(key, -1), int) or isinstance(hf.get(key), bool):
            raise ValueError(f"{source}: {key}: {hf[key]!r}; expected an integer")
    check_divides(hf, source, "num_attention_heads", "hidden_size",
                  "each head takes hidden_size / num_attention_heads")


def log_bucket_positions(relative, bucket_size, max_position):
    """transformers' make_log_bucket_position, in numpy float32 as torch computes it: exact for
    |rel| ≤ bucket_size / 2, logarithmic beyond (±511 → ±255, ±512 → ±256 for 256 / 512)."""
    relative = np.asarray(relative, np.int64)
    sign = np.sign(relative)
    mid = bucket_size // 2
    abs_pos = np.where((relative < mid) & (relative > -mid), mid - 1, np.abs(relative))
    ratio = (np.log((abs_pos / mid).astype(np.float32))
             / np.log(np.float32((max_position - 1) / mid))).astype(np.float32)
    log_pos = np.ceil(ratio * np.float32(mid - 1)) + mid
    return np.where(abs_pos <= mid, relative, log_pos * sign).astype(np.int64)


def relative_table_row(relative, config):
    """Row of the relative-embedding table for relative positions i − j (static, host-side)."""
    relative = np.asarray(relative)
    if config.position_buckets > 0:
        relative = log_bucket_positions(relative, config.position_buckets,
                                        config.max_relative_positions)
    return np.clip(relative + config.span, 0, 2 * config.span - 1).astype(np.int32)


def relative_position_index(length, config):
    """[L, L] rows of the relative-embedding table that query i uses for key j (static, host-side)."""
    return relative_table_row(np.arange(length)[:, None] - np.arange(length)[None, :], config)


def diagonal_to_square(x):
    """x [..., L, 2L − 1] with x[..., i, m] the score of relative position i − j = L − 1 − m  ->
    [..., L, L] indexed by (i, j): row i shifted left by L − 1 − i, done by reshapes (no [L, L]
    gather; the Transformer-XL relative shift)."""
    *lead, length, width = x.shape
    if length == 1:
        return x
    flat = x.reshape(*lead, length * width)[..., length - 1:length - 1 + length * (2 * length - 2)]
    return flat.reshape(*lead, length, 2 * length - 2)[..., :length]


class LayerNorm(nnx.Module):
    def __init__(self, dim, eps, param_dtype, rngs, layers=None):
        stack, axes = ((layers,), ("layers",)) if layers else ((), ())
        self.weight = param(rngs, (*stack, dim), (*axes, "norm"), param_dtype, init="ones")
        self.bias = param(rngs, (*stack, dim), (*axes, "norm"), param_dtype, init="zeros")
        self.eps = eps

    def __call__(self, x):
        x32 = x.astype(jnp.float32)
        mean = jnp.mean(x32, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
        y = (x32 - mean) * jax.lax.rsqrt(var + self.eps)
        return (y * self.weight[...] + self.bias[...]).astype(x.dtype)


class Linear(nnx.Module):
    """x @ kernel + bias; with `layers`, every parameter has a leading layer axis (one per layer)."""

    def __init__(self, d_in, d_out, axes, param_dtype, rngs, layers=None):
        stack, lead = ((layers,), ("layers",)) if layers else ((), ())
        self.kernel = param(rngs, (*stack, d_in, d_out), (*lead, *axes), param_dtype)
        self.bias = param(rngs, (*stack, d_out), (*lead, *axes[1:]), param_dtype, init="zeros")

    def __call__(self, x):
        return x @ self.kernel[...].astype(x.dtype) + self.bias[...].astype(x.dtype)


class DisentangledAttention(nnx.Module):
    def __init__(self, config, rngs, layers=None):
        c, pd = config, config.param_dtype
        self.config = config
        dims = (c.hidden_size, c.hidden_size)
        self.query_proj = Linear(*dims, ("embed", "heads"), pd, rngs, layers)
        self.key_proj = Linear(*dims, ("embed", "heads"), pd, rngs, layers)
        self.value_proj = Linear(*dims, ("embed", "heads"), pd, rngs, layers)
        self.output = Linear(*dims, ("heads", "embed"), pd, rngs, layers)
        self.output_norm = LayerNorm(c.hidden_size, c.layer_norm_eps, pd, rngs, layers)

    def _heads(self, x):
        *lead, n, _ = x.shape
        x = x.reshape(*lead, n, self.config.num_heads, self.config.head_dim)
        return jnp.moveaxis(x, -2, -3)  # [..., H, n, D]

    def __call__(self, x, real, rel_embeddings, rel_rows):
        """x [B, L, E]; real [B, L] bool (not padding); rel_embeddings [R, E] (normalised, only the
        rows this length reaches); rel_rows [2, 2L − 1]: the row of rel_embeddings for relative
        position t = L − 1 − m (c2p, row 0) and for −t (p2c, row 1)."""
        c = self.config
        f32 = jnp.float32
        scale = math.sqrt(c.head_dim * (1 + c.c2p + c.p2c))
        q, k, v = (self._heads(proj(x)) for proj in (self.query_proj, self.key_proj, self.value_proj))
        # One 1/scale on the [B, H, L, D] queries instead of one per [B, H, L, L] score term.
        q = q / jnp.asarray(scale, q.dtype)
        scores = jnp.einsum("bhid,bhjd->bhij", q, k, preferred_element_type=f32)
        rel = rel_embeddings.astype(x.dtype)
        # Position terms: [L, R] products, the 2L − 1 columns of each relative position picked by a
        # one-axis take, then shifted into [L, L]: c2p[i, j] = Q_i · Kr[P(i − j)].
        if c.c2p:
            pos_key = self._heads(self.key_proj(rel))  # [H, R, D]
            c2p = jnp.einsum("bhid,hrd->bhir", q, pos_key, preferred_element_type=f32)
            scores += diagonal_to_square(jnp.take(c2p, rel_rows[0], axis=-1))
        if c.p2c:  # p2c[i, j] = K_j · Qr[P(i − j)]: the same shift on (j, i), then transposed
            pos_query = self._heads(self.query_proj(rel)) / jnp.asarray(scale, x.dtype)
            p2c = jnp.einsum("bhjd,hrd->bhjr", k, pos_query, preferred_element_type=f32)
            scores += jnp.swapaxes(diagonal_to_square(jnp.take(p2c, rel_rows[1], axis=-1)), -1, -2)
        mask = real[:, None, :, None] & real[:, None, None, :]
        scores = jnp.where(mask, scores, jnp.finfo(f32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
        context = jnp.einsum("bhij,bhjd->bihd", probs, v).reshape(x.shape)
        return self.output_norm(self.output(context) + x)


class EncoderLayer(nnx.Module):
    """One post-LN layer; built with `layers=N`, one module holds all N layers' parameters stacked."""

    def __init__(self, config, rngs, layers=None):
        c, pd = config, config.param_dtype
        self.attention = DisentangledAttention(config, rngs, layers)
        self.intermediate = Linear(c.hidden_size, c.intermediate_size, ("embed", "mlp"), pd, rngs,
                                   layers)
        self.output = Linear(c.intermediate_size, c.hidden_size, ("mlp", "embed"), pd, rngs, layers)
        self.output_norm = LayerNorm(c.hidden_size, c.layer_norm_eps, pd, rngs, layers)

    def __call__(self, x, real, rel_embeddings, rel_rows):
        y = self.attention(x, real, rel_embeddings, rel_rows)
        hidden = jax.nn.gelu(self.intermediate(y), approximate=False)
        return self.output_norm(self.output(hidden) + y)


class Deberta(nnx.Module):
    def __init__(self, config, *, rngs):
        c, pd = config, config.param_dtype
        self.config = config
        self.word_embeddings = param(rngs, (c.vocab_size, c.hidden_size), ("vocab", "embed"), pd)
        self.embed_norm = LayerNorm(c.hidden_size, c.layer_norm_eps, pd, rngs)
        self.rel_embeddings = param(rngs, (2 * c.span, c.hidden_size), ("length", "embed"), pd)
        self.rel_norm = LayerNorm(c.hidden_size, c.layer_norm_eps, pd, rngs)
        self.layers = EncoderLayer(c, rngs, layers=c.num_layers)  # every parameter [N, ...]

    def __call__(self, input_ids, attention_mask):
        """Last-layer hidden states [B, L, E] for token ids [B, L] and a 0/1 mask [B, L]."""
        c = self.config
        dtype = jnp.dtype(c.dtype)
        real = attention_mask.astype(bool)
        x = self.embed_norm(jnp.take(self.word_embeddings[...], input_ids, axis=0).astype(dtype))
        x = x * real[..., None].astype(dtype)
        # Only the table rows a length-L input can reach: c2p / p2c then cost [L, R], R ≤ 2S.
        offsets = np.arange(input_ids.shape[1] - 1, -input_ids.shape[1], -1)
        rows = np.stack([relative_table_row(offsets, c), relative_table_row(-offsets, c)])
        low, high = int(rows.min()), int(rows.max()) + 1
        rel_embeddings = self.rel_norm(self.rel_embeddings[low:high])
        rel_rows = jnp.asarray(rows - low)
        graphdef, stacked = nnx.split(self.layers)

        def layer(x, params):
            return nnx.merge(graphdef, params)(x, real, rel_embeddings, rel_rows), None

        layer = rematerialised(layer, c.remat)
        if c.scan_layers:  # one compiled layer body, whatever the depth
            x, _ = jax.lax.scan(layer, x, stacked)
        else:  # every layer inlined: the comparison for parity and compile-time benchmarks
            for i in range(c.num_layers):
                x, _ = layer(x, jax.tree.map(lambda a, i=i: a[i], stacked))
        return x


def key_rules(hf_prefix="", ours_prefix=""):
    """transformers' DebertaV2Model keys -> our parameter paths, for `loading.KeyMap`: every
    per-layer tensor `encoder.layer.{layer}.…` fills slot `layer` of a stacked parameter."""
    layer = hf_prefix + "encoder.layer.{layer}."
    rules = [
        ("embeddings.word_embeddings.weight", "word_embeddings", COPY),
        ("embeddings.LayerNorm.{p}", "embed_norm.{p}", COPY),
        ("encoder.rel_embeddings.weight", "rel_embeddings", COPY),
        ("encoder.LayerNorm.{p}", "rel_norm.{p}", COPY),
    ]
    rules = [Rule(hf_prefix + hf, ours_prefix + ours, t) for hf, ours, t in rules]
    return rules + [Rule(layer + hf, ours_prefix + "layers." + ours, t) for hf, ours, t in [
        ("attention.self.{qkv}_proj.weight", "attention.{qkv}_proj.kernel", TRANSPOSE),
        ("attention.self.{qkv}_proj.bias", "attention.{qkv}_proj.bias", COPY),
        ("attention.output.dense.weight", "attention.output.kernel", TRANSPOSE),
        ("attention.output.dense.bias", "attention.output.bias", COPY),
        ("attention.output.LayerNorm.{p}", "attention.output_norm.{p}", COPY),
        ("intermediate.dense.weight", "intermediate.kernel", TRANSPOSE),
        ("intermediate.dense.bias", "intermediate.bias", COPY),
        ("output.dense.weight", "output.kernel", TRANSPOSE),
        ("output.dense.bias", "output.bias", COPY),
        ("output.LayerNorm.{p}", "output_norm.{p}", COPY),
    ]]


PLACEHOLDERS = {"p": "weight|bias", "qkv": "query|key|value"}
IGNORED = r".*position_ids"
KEY_MAP = KeyMap(key_rules(), PLACEHOLDERS, ignored=IGNORED)


def deberta_from_tensors(config, tensors, *, mesh=None):
    """A Deberta from {HF key: array} or a `loading` source (read lazily, layer by layer into the
    stacked parameters); every missing, unexpected or mis-shaped tensor is named in one ValueError."""
    source = tensors if hasattr(tensors, "read") else ArraySource(tensors)
    graphdef, state = nnx.split(nnx.eval_shape(lambda: Deberta(config, rngs=nnx.Rngs(0))))
    load_into(state, KEY_MAP, source, mesh=mesh, what="DeBERTa checkpoint does not match the config")
    return nnx.merge(graphdef, state)
