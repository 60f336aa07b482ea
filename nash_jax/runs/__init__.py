"""One resumable run directory and what it owns; everything written is written whole or not at all.

    directory     RunDir: the lock (one writer at a time), the resolved config, the manifest of finished
                  stages (verified on resume: a damaged stage is redone with everything after it), and
                  the sweep of temporaries an interrupted write left
    fingerprints  what the manifest records of each file (size and SHA-256, or a hash of its ends)
    metrics       metrics.jsonl and TensorBoard (RunDir.log_metrics), read back by read_metrics
    tables        a stage's parquet tables
    checkpoints   orbax checkpoints of a training loop
    keys          the PRNG keys and host seeds of every draw, from (seed, iteration, stage, index)
    control       stop requests, crash points for the resume tests, the progress bar
    files         the temp-file-and-rename writers every artifact goes through
    compilation_cache  XLA's persistent compilation cache (a run's compiled programs reused on resume)

This module names what callers use as `runs.X` (`runs.RunDir`, `runs.stage_key`, ...).
"""


from nash_jax.runs.files import (is_own_temporary, write_atomically, write_dir_atomically,
                                 write_text_atomically)
from nash_jax.runs.checkpoints import checkpoint_manager, restore_checkpoint, save_checkpoint
from nash_jax.runs.control import (CRASH_ENV, Interrupted, clear_stop_request, crash_point, progress,
                                   request_stop, stop_requested, training_loop_running)
from nash_jax.runs.directory import RunDir, remove_stale_temporaries
from nash_jax.runs.fingerprints import file_digest
from nash_jax.runs.keys import STAGES, stage_key, stage_number, stage_seed
from nash_jax.runs.metrics import read_metrics
from nash_jax.runs.tables import read_table, write_table

__all__ = ["CRASH_ENV", "Interrupted", "RunDir", "STAGES", "checkpoint_manager", "clear_stop_request",
           "crash_point", "file_digest", "is_own_temporary", "progress", "read_metrics", "read_table",
           "remove_stale_temporaries", "request_stop", "restore_checkpoint", "save_checkpoint",
           "stage_key", "stage_number", "stage_seed", "stop_requested", "training_loop_running",
           "write_atomically", "write_dir_atomically", "write_table", "write_text_atomically"]
