"""Keys and seeds of a run's random draws: every draw is keyed by (seed, iteration, stage, index), so
that a resumed run draws exactly what an uninterrupted one draws."""

import zlib

import numpy as np

# Stage numbers of the keys that the built-in recipes draw with (fixed, so that a run started by an
# earlier version resumes with the same draws); any other stage name is numbered by its CRC-32.
STAGES = {"generate": 1, "train": 2, "eval": 3, "warm_start": 4, "opponent": 5}


def stage_number(stage):
    return STAGES.get(stage, zlib.crc32(stage.encode()) & 0x7FFFFFFF)


def stage_key(seed, iteration, stage, index=0):
    """The PRNG key of one random draw: (seed, iteration, stage, index) folded in, so that a resumed
    run draws exactly what an uninterrupted one draws."""
    import jax

    key = jax.random.PRNGKey(seed)
    for part in (iteration, stage_number(stage), index):
        key = jax.random.fold_in(key, part)
    return key


def stage_seed(seed, iteration, stage):
    """An integer seed for host-side shuffles (grain), from the same parts as stage_key."""
    return int(np.random.SeedSequence([seed, iteration, stage_number(stage)]).generate_state(1)[0])
