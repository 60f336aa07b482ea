"""What the self-play math shares: masked segments over explicit integer ids, safe division, choices by
name. An entry counts as padding when its mask is false or its id lies outside [0, size)."""

import jax
import jax.numpy as jnp

F32 = jnp.float32


def choice(table, name, what):
    if name not in table:
        raise ValueError(f"unknown {what} {name!r}; expected one of {sorted(table)}")
    return table[name]


def in_range(ids, mask, size):
    """mask ∧ 0 ≤ id < size: the entries that take part (bool, shaped like ids)."""
    inside = (ids >= 0) & (ids < size)
    return inside if mask is None else inside & jnp.asarray(mask, bool)


def masked_segments(ids, mask, size):
    """(valid [N] bool, ids with padding moved to `size` where segment sums drop it, count [size] f32)."""
    valid = in_range(ids, mask, size)
    ids = jnp.where(valid, ids, size)
    return valid, ids, jax.ops.segment_sum(valid.astype(F32), ids, size)


def read(values, ids):
    """values[ids], 0 where an id lies outside [0, len(values)) (padding; −1 does not wrap around)."""
    inside = (ids >= 0) & (ids < values.shape[0])
    return jnp.where(inside, values[jnp.clip(ids, 0, values.shape[0] - 1)], 0)


def safe_divide(num, den):
    """num / den, 0 where den is 0 (an empty group, an empty batch)."""
    return jnp.where(den != 0, num / jnp.where(den != 0, den, 1), 0.0)
