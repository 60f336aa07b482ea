"""Parameter creation shared by the model files: every parameter names its axes for the rules table."""

import jax
import jax.numpy as jnp
from flax import nnx


def param(rngs, shape, axes, dtype, init="normal"):
    """An nnx.Param with `logical_axes` metadata; init "normal" (std 0.02), "ones" or "zeros"."""
    if init == "ones":
        value = jnp.ones(shape, dtype)
    elif init == "zeros":
        value = jnp.zeros(shape, dtype)
    else:
        value = (0.02 * jax.random.normal(rngs.params(), shape)).astype(dtype)
    return nnx.Param(value, logical_axes=axes)
