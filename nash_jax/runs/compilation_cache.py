"""XLA's persistent compilation cache: compiled programs written to a directory and reused by later
processes, so that a rerun or a resumed run skips the compile of every program it has seen before."""

from pathlib import Path

import jax


def enable(directory):
    """Cache every compiled program under `directory` (made if missing; relative to the current
    working directory). Call before the first compile: JAX reads the setting once, at that compile."""
    path = Path(directory).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise ValueError(f"compilation_cache_dir={directory}: {path} exists and is not a directory")
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    # JAX's defaults skip programs that compile in under a second; a run's many small programs
    # (sampling, judging, per-shape steps) add up, so every one is kept.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path
