"""Which run directory a config runs in (a new one, or the unfinished one it resumes), and its lock,
taken by process 0 for every process of the run."""

import dataclasses
import time
from pathlib import Path

import yaml

from nash_jax import config as config_lib
from nash_jax.config import to_dict
from nash_jax.runs import RunDir


def resolve_run_dir(config, root="runs"):
    """The config with run_dir filled in. Without one, the newest unfinished runs/<name>-<timestamp>
    started with this same config is resumed (so that rerunning a command continues it); otherwise a
    new runs/<name>-<timestamp> is made."""
    if config.run_dir:
        return config
    for path in sorted(Path(root).glob(f"{config.name}-*"), reverse=True):
        candidate = dataclasses.replace(config, run_dir=str(path))
        if (_saved_config(path) == config_lib.normalised(to_dict(candidate))
                and not RunDir(path).done("report")):
            return candidate
    stamp = time.strftime('%Y%m%d-%H%M%S', time.localtime(_process_0_time()))
    return dataclasses.replace(config, run_dir=str(Path(root) / f"{config.name}-{stamp}"))


def _process_0_time():
    """The clock of process 0, so that every process of a run names the same new directory."""
    import jax

    now = int(time.time())
    if jax.process_count() > 1:
        import numpy as np
        from jax.experimental import multihost_utils
        now = int(multihost_utils.broadcast_one_to_all(np.int64(now)))
    return now


def _saved_config(path):
    """The config saved in run directory `path`, as this version reads it, with run_dir set to `path`
    (a moved directory still matches); None if there is none that reads."""
    try:
        saved = config_lib.normalised(yaml.safe_load((path / "config.yaml").read_text()))
    except (OSError, yaml.YAMLError):
        return None
    return saved and {**saved, "run_dir": str(path)}


def acquire_on_every_process(run_dir):
    """Process 0 takes the run directory's lock; every process learns whether it did (so that none
    goes on alone into the run's collectives)."""
    import jax

    error = None
    try:
        run_dir.acquire()
    except ValueError as err:
        error = err
    if jax.process_count() > 1:
        import numpy as np
        from jax.experimental import multihost_utils
        ok = multihost_utils.broadcast_one_to_all(np.int32(error is None))
        if error is None and not ok:
            error = ValueError(f"process 0 could not take the lock of run directory {run_dir.path}")
    if error is not None:
        raise error
