"""DeBERTa-v2/v3 encoder in Flax NNX: the backbone of the PairRM judge.

Disentangled attention as transformers' `DebertaV2Model` computes it: content-to-content,
content-to-position (c2p) and position-to-content (p2c) scores, keys shared between content and
relative positions (`share_att_key`), log-bucketed relative positions, LayerNorm on the relative
embeddings, post-LN layers, exact GELU, LayerNorm eps 1e-7. Only relative positions: no absolute
position or token-type embeddings (PairRM's configuration); other options are refused by name.
"""

import math
import re
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nash_jax.models.params import param


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

    @property
    def head_dim(self):
        return self.hidden_size // self.num_heads

    @property
    def span(self):
        """Half the number of relative-embedding rows (att_span in transformers)."""
        return self.position_buckets if self.position_buckets > 0 else self.max_relative_positions


def config_from_hf(hf, *, dtype="float32", param_dtype=None, source="config.json"):
    """DebertaConfig from a transformers DebertaV2Config-style config.json dict."""
    if hf.get("model_type") not in ("deberta-v2", "deberta_v2"):
        raise ValueError(f"{source}: model_type={hf.get('model_type')!r}; expected 'deberta-v2'")
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
        dtype=dtype, param_dtype=param_dtype or dtype)


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


def relative_position_index(length, config):
    """[L, L] rows of the relative-embedding table that query i uses for key j (static, host-side)."""
    relative = np.arange(length)[:, None] - np.arange(length)[None, :]
    if config.position_buckets > 0:
        relative = log_bucket_positions(relative, config.position_buckets,
                                        config.max_relative_positions)
    return np.clip(relative + config.span, 0, 2 * config.span - 1).astype(np.int32)


class LayerNorm(nnx.Module):
    def __init__(self, dim, eps, param_dtype, rngs):
        self.weight = param(rngs, (dim,), ("norm",), param_dtype, init="ones")
        self.bias = param(rngs, (dim,), ("norm",), param_dtype, init="zeros")
        self.eps = eps

    def __call__(self, x):
        x32 = x.astype(jnp.float32)
        mean = jnp.mean(x32, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
        y = (x32 - mean) * jax.lax.rsqrt(var + self.eps)
        return (y * self.weight[...] + self.bias[...]).astype(x.dtype)


class Linear(nnx.Module):
    def __init__(self, d_in, d_out, axes, param_dtype, rngs):
        self.kernel = param(rngs, (d_in, d_out), axes, param_dtype)
        self.bias = param(rngs, (d_out,), axes[1:], param_dtype, init="zeros")

    def __call__(self, x):
        return x @ self.kernel[...].astype(x.dtype) + self.bias[...].astype(x.dtype)


class DisentangledAttention(nnx.Module):
    def __init__(self, config, rngs):
        c, pd = config, config.param_dtype
        self.config = config
        self.query_proj = Linear(c.hidden_size, c.hidden_size, ("embed", "heads"), pd, rngs)
        self.key_proj = Linear(c.hidden_size, c.hidden_size, ("embed", "heads"), pd, rngs)
        self.value_proj = Linear(c.hidden_size, c.hidden_size, ("embed", "heads"), pd, rngs)
        self.output = Linear(c.hidden_size, c.hidden_size, ("heads", "embed"), pd, rngs)
        self.output_norm = LayerNorm(c.hidden_size, c.layer_norm_eps, pd, rngs)

    def _heads(self, x):
        b, n, _ = x.shape
        return x.reshape(b, n, self.config.num_heads, self.config.head_dim).transpose(0, 2, 1, 3)

    def __call__(self, x, mask, rel_embeddings, rel_index):
        """x [B, L, E]; mask [B, 1, L, L] bool; rel_embeddings [2S, E] (normalised); rel_index [L, L]."""
        c = self.config
        q, k, v = (self._heads(proj(x)) for proj in (self.query_proj, self.key_proj, self.value_proj))
        scale = math.sqrt(c.head_dim * (1 + c.c2p + c.p2c))
        scores = jnp.einsum("bhid,bhjd->bhij", q, k / scale).astype(jnp.float32)
        rel = rel_embeddings[None].astype(x.dtype)
        if c.c2p:  # query content · key position: Q_i · Kr[P[i, j]]
            pos_key = self._heads(self.key_proj(rel))[0]  # [H, 2S, D]
            c2p = jnp.einsum("bhid,hrd->bhir", q, pos_key)
            scores += jnp.take_along_axis(c2p, rel_index[None, None], axis=-1) / scale
        if c.p2c:  # key content · query position: K_j · Qr[P[i, j]]
            pos_query = self._heads(self.query_proj(rel))[0]
            p2c = jnp.einsum("bhjd,hrd->bhjr", k, pos_query)
            scores += jnp.swapaxes(jnp.take_along_axis(p2c, rel_index.T[None, None], axis=-1),
                                   -1, -2) / scale
        scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
        context = jnp.einsum("bhij,bhjd->bihd", probs, v).reshape(x.shape)
        return self.output_norm(self.output(context) + x)


class EncoderLayer(nnx.Module):
    def __init__(self, config, rngs):
        c, pd = config, config.param_dtype
        self.attention = DisentangledAttention(config, rngs)
        self.intermediate = Linear(c.hidden_size, c.intermediate_size, ("embed", "mlp"), pd, rngs)
        self.output = Linear(c.intermediate_size, c.hidden_size, ("mlp", "embed"), pd, rngs)
        self.output_norm = LayerNorm(c.hidden_size, c.layer_norm_eps, pd, rngs)

    def __call__(self, x, mask, rel_embeddings, rel_index):
        y = self.attention(x, mask, rel_embeddings, rel_index)
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
        self.layers = nnx.List([EncoderLayer(c, rngs) for _ in range(c.num_layers)])

    def __call__(self, input_ids, attention_mask):
        """Last-layer hidden states [B, L, E] for token ids [B, L] and a 0/1 mask [B, L]."""
        dtype = jnp.dtype(self.config.dtype)
        real = attention_mask.astype(bool)
        x = self.embed_norm(jnp.take(self.word_embeddings[...], input_ids, axis=0).astype(dtype))
        x = x * real[..., None].astype(dtype)
        mask = (real[:, None, :, None] & real[:, None, None, :])
        rel_embeddings = self.rel_norm(self.rel_embeddings[...])
        rel_index = jnp.asarray(relative_position_index(input_ids.shape[1], self.config))
        for layer in self.layers:
            x = layer(x, mask, rel_embeddings, rel_index)
        return x


# transformers' DebertaV2Model key names (after any prefix) -> our parameter paths.
KEY_MAP = [
    (r"embeddings\.word_embeddings\.weight", "word_embeddings", "copy"),
    (r"embeddings\.LayerNorm\.(weight|bias)", "embed_norm.{0}", "copy"),
    (r"encoder\.rel_embeddings\.weight", "rel_embeddings", "copy"),
    (r"encoder\.LayerNorm\.(weight|bias)", "rel_norm.{0}", "copy"),
    (r"encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)_proj\.weight",
     "layers.{0}.attention.{1}_proj.kernel", "transpose"),
    (r"encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)_proj\.bias",
     "layers.{0}.attention.{1}_proj.bias", "copy"),
    (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.weight",
     "layers.{0}.attention.output.kernel", "transpose"),
    (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.bias", "layers.{0}.attention.output.bias",
     "copy"),
    (r"encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.(weight|bias)",
     "layers.{0}.attention.output_norm.{1}", "copy"),
    (r"encoder\.layer\.(\d+)\.intermediate\.dense\.weight", "layers.{0}.intermediate.kernel",
     "transpose"),
    (r"encoder\.layer\.(\d+)\.intermediate\.dense\.bias", "layers.{0}.intermediate.bias", "copy"),
    (r"encoder\.layer\.(\d+)\.output\.dense\.weight", "layers.{0}.output.kernel", "transpose"),
    (r"encoder\.layer\.(\d+)\.output\.dense\.bias", "layers.{0}.output.bias", "copy"),
    (r"encoder\.layer\.(\d+)\.output\.LayerNorm\.(weight|bias)", "layers.{0}.output_norm.{1}", "copy"),
]
IGNORED = re.compile(r".*position_ids$")


def deberta_from_tensors(config, tensors, prefix=""):
    """A Deberta from {HF key: numpy array}; every missing, unexpected or mis-shaped tensor is named
    in one ValueError. Keys outside `prefix` are left for the caller (a judge's head)."""
    graphdef, state = nnx.split(nnx.eval_shape(lambda: Deberta(config, rngs=nnx.Rngs(0))))
    expected = {".".join(map(str, path)): v for path, v in nnx.to_flat_state(state)}
    loaded, problems = set(), []
    for key, array in tensors.items():
        if not key.startswith(prefix) or IGNORED.fullmatch(key):
            continue
        name = key[len(prefix):]
        match = next(((m, ours, kind) for pattern, ours, kind in KEY_MAP
                      if (m := re.fullmatch(pattern, name))), None)
        if match is None or match[1].format(*match[0].groups()) not in expected:
            problems.append(f"unexpected tensor {key!r}")
            continue
        ours = match[1].format(*match[0].groups())
        loaded.add(ours)  # present, even if mis-shaped: reported once, below
        value = np.asarray(array).T if match[2] == "transpose" else np.asarray(array)
        want = expected[ours].get_value().shape
        if value.shape != want:
            problems.append(f"tensor {key!r} has shape {list(np.shape(array))}; expected "
                            f"{list(want[::-1] if match[2] == 'transpose' else want)}")
            continue
        expected[ours].set_value(jnp.asarray(value, jnp.dtype(config.param_dtype)))
    problems += [f"missing tensor for parameter {p}" for p in sorted(set(expected) - loaded)]
    if problems:
        raise ValueError(f"DeBERTa checkpoint does not match the config ({len(problems)} problems):"
                         "\n  " + "\n  ".join(problems))
    return nnx.merge(graphdef, state)
