"""A frozen base stored quantised (QLoRA's int8 and nf4): each projection kernel of the decoder layers
replaced by its codes and scales, dequantised one layer at a time inside the scanned forward.

    int8  per output channel: codes = round(W / s) in [-127, 127], s = max |W| / 127 over the input
          axes; 1 byte a parameter (plus one fp32 scale per output).
    nf4   QLoRA's NormalFloat4 (Dettmers et al. 2023): blocks of 64 inputs of one output column,
          scaled by their max |W| and each weight mapped to the nearest of the 16 NF4 levels; two codes
          a byte, so 0.5 byte a parameter (plus one fp32 scale per 64).

The codes and scales are nnx.Params (so that a LoRA model's split puts them with the frozen base, an
argument of every compiled step); nothing trains them. `kernel(module, name)` is the one read of a
projection's weight: the stored kernel, or the dequantised one in the compute path.
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nash_jax import parallel

NF4_LEVELS = np.asarray([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
    0.7229568362236023, 1.0], np.float32)
NF4_BLOCK = 64


def kernel(module, name):
    """Projection `name`'s kernel [L?, *in, *out] of `module` (stacked, or one layer's in the scan):
    stored, or dequantised in fp32."""
    codes = getattr(module, f"{name}_codes", None)
    if codes is None:
        return getattr(module, name)[...]
    # (the scanned layer's remat keeps no dequantised kernel for the backward: models/remat.py)
    return dequantise(codes[...], getattr(module, f"{name}_scale")[...], getattr(module, f"{name}_shape"))


def is_quantised(module):
    """Whether any projection of `module` (a model's stacked layers) is stored quantised."""
    return any(hasattr(getattr(module, path, None), f"{name}_codes")
               for path in ("attn", "mlp") for name in ("q_proj", "gate_proj"))


def dequantise(codes, scale, shape):
    """The fp32 kernel from its codes and scales (int8, or nf4 packed [L?, blocks, block/2, out]);
    `shape` is one layer's kernel shape [*in, *out] (a leading layer axis of the codes is kept)."""
    if codes.dtype == jnp.int8:
        return codes.astype(jnp.float32) * scale
    low, high = codes & 0xF, codes >> 4
    indices = jnp.concatenate([low, high], axis=-2).astype(jnp.int32)
    values = jnp.asarray(NF4_LEVELS)[indices] * scale  # [L?, blocks, block, out]
    return values.reshape(*codes.shape[:-3], *shape)


def restore(module, name, value):
    """Put a plain kernel `value` back in place of projection `name`'s codes and scales."""
    setattr(module, name, nnx.Param(value, logical_axes=getattr(module, f"{name}_axes")))
    for suffix in ("codes", "scale", "shape", "axes"):
        delattr(module, f"{name}_{suffix}")


def quantise_int8(value, n_in):
    """(codes int8, scale fp32) of a stacked kernel [L, *in, *out]: per-output absmax, one layer at
    a time (no fp32 copy of the whole stack)."""
    def one(w):
        w = w.astype(jnp.float32)
        scale = jnp.maximum(jnp.max(jnp.abs(w), axis=tuple(range(n_in)), keepdims=True),
                            1e-12) / 127.0
        return jnp.clip(jnp.round(w / scale), -127, 127).astype(jnp.int8), scale

    return jax.lax.map(one, value)


def quantise_nf4(value, n_in):
    """(codes uint8 [L, blocks, block/2, out], scale fp32 [L, blocks, 1, out]) of a stacked kernel
    [L, *in, *out]: blocks of NF4_BLOCK inputs (all of them, when fewer or not a multiple), each
    weight the nearest NF4 level of w / max|block| (by the midpoints between levels), layer by layer."""
    inputs = int(np.prod(value.shape[1:1 + n_in]))
    block = NF4_BLOCK if inputs % NF4_BLOCK == 0 else inputs
    if block % 2:
        raise ValueError(f"nf4 needs an even number of inputs a block; a kernel {value.shape} has "
                         f"{inputs}")
    midpoints = jnp.asarray((NF4_LEVELS[1:] + NF4_LEVELS[:-1]) / 2)

    def one(w):
        w = w.astype(jnp.float32).reshape(inputs // block, block, -1)
        scale = jnp.maximum(jnp.max(jnp.abs(w), axis=1, keepdims=True), 1e-12)
        nearest = jnp.searchsorted(midpoints, w / scale).astype(jnp.uint8)
        half = block // 2
        return nearest[:, :half] | (nearest[:, half:] << 4), scale

    return jax.lax.map(one, value)


QUANTISERS = {"int8": quantise_int8, "nf4": quantise_nf4}


def quantise_base(model, kind, projections):
    """Replace each projection kernel of `model`'s layers ({name: (module path, _, input axes)}) by
    its `kind` codes and scales (in place; returns it). kind "none" leaves the model as it is."""
    if kind == "none":
        return model
    for name, (module_path, _, n_in) in projections.items():
        module = getattr(model.layers, module_path)
        variable = getattr(module, name)
        value, axes = variable.get_value(), variable.get_metadata().get("logical_axes")
        codes, scale = QUANTISERS[kind](value, n_in)
        traced = isinstance(value, jax.core.Tracer)  # (nnx.eval_shape: planning)
        mesh = None if traced else getattr(getattr(value, "sharding", None), "mesh", None)
        setattr(module, f"{name}_codes", _placed(codes, _code_axes(kind, axes, n_in), mesh))
        setattr(module, f"{name}_scale", _placed(scale, _scale_axes(kind, axes, n_in), mesh))
        setattr(module, f"{name}_shape", tuple(value.shape[1:]))
        setattr(module, f"{name}_axes", axes)
        delattr(module, name)
    return model


def _placed(value, axes, mesh):
    """An nnx.Param of `value` on `mesh` by its logical axes (as it is, without a mesh)."""
    variable = nnx.Param(value, logical_axes=axes)
    if mesh is not None and not getattr(mesh, "empty", False):
        variable.set_value(jax.device_put(value, parallel.variable_sharding(variable, mesh)))
    return variable


def _code_axes(kind, axes, n_in):
    if axes is None or kind == "int8":
        return axes
    # nf4 [L, blocks, block/2, out]: the blocks take the input axis's rule and the output axis keeps
    # its own, each when it is a single one (a dimension they do not divide stays whole)
    return (axes[0], axes[1] if n_in == 1 else None, None,
            axes[-1] if len(axes) == 2 + n_in else None)


def _scale_axes(kind, axes, n_in):
    if axes is None:
        return None
    if kind == "int8":
        return (axes[0], *[None] * n_in, *axes[1 + n_in:])
    return _code_axes(kind, axes, n_in)
