"""Files written whole or not at all: write to a temporary name beside the target, then rename.

The lowest layer that touches the file system: model loaders/exporters and the run directory both use
it, so it imports nothing of the package at import time.
"""

import os
import re
import shutil
import tempfile
from pathlib import Path

# Every temporary this module makes is named `.NAME.nash-jax-<random>.tmp` (or `.NAME.nash-jax-old-…`):
# the stale-temporary sweep of a run directory removes only names of this shape, never another
# program's `.x.tmp`.
TEMPORARY_INFIX = ".nash-jax-"
_OWN_TEMPORARY = re.compile(r"\..+" + re.escape(TEMPORARY_INFIX) + r"[A-Za-z0-9_-]+\.tmp")


def is_own_temporary(name):
    """Whether a file name is one of this module's temporaries."""
    return _OWN_TEMPORARY.fullmatch(name) is not None


def _temporary_prefix(path, kind=""):
    return f".{Path(path).name}{TEMPORARY_INFIX}{kind}"


def write_atomically(path, write):
    """Call write(tmp_path) on a temporary file beside `path`, then rename it into place.

    A crash midway leaves at most a hidden `.NAME.nash-jax-*.tmp` file, never a truncated `NAME`. In a
    multi-process run only process 0 writes (the others hold the same data).
    """
    from nash_jax.parallel import is_writer  # here, not at the top: `nash-jax game` never loads JAX

    path = Path(path)
    if not is_writer():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_temporary_prefix(path), suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a plain open() follows the umask
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_umask():
    mask = os.umask(0)  # the only way to read it; done once, at import, before any thread writes
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def _umask():
    return _UMASK


def write_text_atomically(path, text):
    write_atomically(path, lambda tmp: Path(tmp).write_text(text))


def write_dir_atomically(path, write):
    """Call write(tmp_dir) on a fresh directory beside `path`, then swap it into place (on every
    process that calls it: multi-process callers call it on process 0 only)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=_temporary_prefix(path), suffix=".tmp"))
    try:
        write(tmp)
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    # The old directory is renamed aside, not deleted, before the new one takes its name: a kill in
    # between leaves a stale temporary (removed on resumption), never a half-deleted directory.
    old = None
    if path.exists():
        old = Path(tempfile.mkdtemp(dir=path.parent, prefix=_temporary_prefix(path, "old-"),
                                   suffix=".tmp"))
        os.replace(path, old / path.name)
    os.replace(tmp, path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
