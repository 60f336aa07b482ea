"""The small parts of the decoder family's layers (Llama/Mistral/Qwen/Gemma, models/llama.py): stacked
parameters, RMSNorm (Llama's `w * x̂` and Gemma's `(1 + w) * x̂`), rotary embeddings with their
frequency scalings, and the gated MLP with its activation (SwiGLU, or GeGLU with tanh GELU for Gemma).

Numerics follow transformers: norms in fp32, matmuls in the compute dtype.
"""

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nash_jax.models import lora, quantised
from nash_jax.models.params import param

# transformers' ACT2FN names -> the function (gelu_pytorch_tanh is GELU's tanh approximation)
ACTIVATIONS = {"silu": jax.nn.silu, "gelu_pytorch_tanh": partial(jax.nn.gelu, approximate=True),
               "gelu": partial(jax.nn.gelu, approximate=False)}


def stacked_param(layers, rngs, shape, axes, dtype, init="normal"):
    """A parameter with a leading layer axis when `layers` is set (the stacked layout of scanned
    layers), a plain one otherwise."""
    if layers is None:
        return param(rngs, shape, axes, dtype, init)
    return param(rngs, (layers, *shape), ("layers", *axes), dtype, init)


class RMSNorm(nnx.Module):
    """x̂ = x / rms(x) in fp32, then `w * x̂` in x's dtype (Llama), or with plus_one `(1 + w) * x̂` in
    fp32 and cast after (Gemma: the weight is stored as w, initialised to 0, as transformers does)."""

    def __init__(self, dim, eps, axis_name, param_dtype, rngs, layers=None, plus_one=False):
        self.weight = stacked_param(layers, rngs, (dim,), (axis_name,), param_dtype,
                                    init="zeros" if plus_one else "ones")
        self.eps = eps
        self.plus_one = plus_one

    def __call__(self, x):
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        if self.plus_one:
            return (normed * (1.0 + self.weight[...].astype(jnp.float32))).astype(x.dtype)
        return self.weight[...].astype(x.dtype) * normed.astype(x.dtype)


def rope_inverse_frequencies(config, local=False):
    """[head_dim / 2] float32 inverse frequencies, with transformers' `llama3`/`linear` scaling.

    local: for a sliding-window layer of a config with its own local base (Gemma 3's
    `rope_local_base_freq`: plain rope, no scaling); other configs use one rope everywhere."""
    dim = config.head_dim
    if local and config.local_rope_theta is not None:
        theta, scaling = config.local_rope_theta, {}
    else:
        theta, scaling = config.rope_theta, dict(config.rope_scaling)
    inv_freq = 1.0 / (np.float32(theta) ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
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
    """cos, sin [G, B, T, 1, D/2] for positions [B, T] and G sets of inverse frequencies [G, D/2]
    (one per window group of layers); computed once per forward, shared by the layers."""
    angles = positions.astype(jnp.float32)[None, ..., None, None] * inv_freq[:, None, None, None, :]
    return jnp.cos(angles).astype(dtype), jnp.sin(angles).astype(dtype)


def apply_rope(x, cos, sin):
    """Rotate x [B, T, H, D] (transformers' rotate-half convention: pairs (i, i + D/2))."""
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


@jax.custom_vjp
def linear(x, kernel):
    """x [..., K] @ kernel [K, M], with the kernel's gradient laid out for XLA:CPU's fast matmul.

    Autodiff leaves the kernel's gradient as the dot xᵀ·dy with x [rows, K] contracted over its
    leading axis: YNNPACK (XLA:CPU's fast dot) refuses a lhs not contracted over its last axis, and
    inside the scanned layers XLA then transposes dy [rows, M] into a copy and runs the matmul on
    Eigen (SmolLM2's MLP, 2032 rows: 49 ms against 27 ms a kernel, one core). Here xᵀ [K, rows] is
    made once (behind an optimization barrier, so that XLA cannot fold it back into the dot) and the
    gradient is the plain matmul xᵀ @ dy. Values and gradients are the same products."""
    return x @ kernel


def _linear_fwd(x, kernel):
    return x @ kernel, (x, kernel)


def _linear_bwd(residuals, d_out):
    x, kernel = residuals
    x_t = jax.lax.optimization_barrier(x.reshape(-1, x.shape[-1]).T)
    d_kernel = x_t @ d_out.reshape(-1, d_out.shape[-1])
    return d_out @ kernel.T, d_kernel.astype(kernel.dtype)


linear.defvjp(_linear_fwd, _linear_bwd)


class MLP(nnx.Module):
    """down(act(gate(x)) * up(x)): SwiGLU with silu, GeGLU with a GELU."""

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
        self.activation = c.hidden_act

    def __call__(self, x):
        dtype = x.dtype

        def projection(inputs, name):
            y = linear(inputs, quantised.kernel(self, f"{name}_proj").astype(dtype))
            y = y + lora.delta(self, f"{name}_proj", inputs, 1)
            return y + getattr(self, f"{name}_bias")[...].astype(dtype) if self.bias else y

        act = ACTIVATIONS[self.activation]
        return projection(act(projection(x, "gate")) * projection(x, "up"), "down")
