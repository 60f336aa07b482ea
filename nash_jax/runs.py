"""Run directories and their artifacts, by the names callers use (`runs.RunDir`, `runs.stage_key`, ...).

Each lives in the module of nash_jax.run that owns it (see its docstring); this module only names them.
"""

from nash_jax.files import (is_own_temporary, write_atomically, write_dir_atomically,
                            write_text_atomically)
from nash_jax.run.checkpoints import checkpoint_manager, restore_checkpoint, save_checkpoint
from nash_jax.run.control import (CRASH_ENV, Interrupted, clear_stop_request, crash_point, progress,
                                  request_stop, stop_requested, training_loop_running)
from nash_jax.run.directory import RunDir, remove_stale_temporaries
from nash_jax.run.fingerprints import file_digest
from nash_jax.run.keys import STAGES, stage_key, stage_number, stage_seed
from nash_jax.run.metrics import read_metrics
from nash_jax.run.tables import read_table, write_table

__all__ = ["CRASH_ENV", "Interrupted", "RunDir", "STAGES", "checkpoint_manager", "clear_stop_request",
           "crash_point", "file_digest", "is_own_temporary", "progress", "read_metrics", "read_table",
           "remove_stale_temporaries", "request_stop", "restore_checkpoint", "save_checkpoint",
           "stage_key", "stage_number", "stage_seed", "stop_requested", "training_loop_running",
           "write_atomically", "write_dir_atomically", "write_table", "write_text_atomically"]
