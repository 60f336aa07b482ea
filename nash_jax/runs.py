"""Run directories and their artifacts, by the names callers use (`runs.RunDir`, `runs.stage_key`, ...).

Each lives in the module of nash_jax.run that owns it (see its docstring); this module only names them.
"""

from nash_jax.files import (is_own_temporary, write_atomically, write_dir_atomically,  # noqa: F401
                            write_text_atomically)
from nash_jax.run.checkpoints import (checkpoint_manager, restore_checkpoint,  # noqa: F401
                                      save_checkpoint)
from nash_jax.run.control import (CRASH_ENV, Interrupted, clear_stop_request, crash_point,  # noqa: F401
                                  progress, request_stop, stop_requested, training_loop_running)
from nash_jax.run.directory import RunDir, remove_stale_temporaries  # noqa: F401
from nash_jax.run.fingerprints import file_digest  # noqa: F401
from nash_jax.run.keys import STAGES, stage_key, stage_number, stage_seed  # noqa: F401
from nash_jax.run.metrics import read_metrics  # noqa: F401
from nash_jax.run.tables import read_table, write_table  # noqa: F401
