"""Files written whole or not at all: write to a temporary name beside the target, then rename.

The lowest layer that touches the file system: model loaders/exporters and the run directory both use
it, so it imports nothing of the package at import time.
"""

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path

# Every temporary this module makes is named `.NAME.nash-jax-<pid>-<host>-<random>.tmp` (or
# `…-old-…`, `…-scratch-…`): the stale-temporary sweep of a run directory removes only names of this
# shape, never another program's `.x.tmp`; outside a run directory, only those whose process has died
# (remove_dead_temporaries).
TEMPORARY_INFIX = ".nash-jax-"
_OWN_TEMPORARY = re.compile(r"\..+" + re.escape(TEMPORARY_INFIX) + r"[A-Za-z0-9_-]+\.tmp")


# What an earlier version named its temporaries (tempfile's 8 random characters, no marker): swept only
# inside a run directory nash_jax made, where nothing else writes.
_EARLIER_TEMPORARY = re.compile(r"\..+\.(old\.)?[a-z0-9_]{8}\.tmp")


def is_own_temporary(name, *, in_run=False):
    """Whether a file name is one of this module's temporaries; in_run: inside a run directory of
    nash_jax's, where an earlier version's unmarked names count too."""
    return _OWN_TEMPORARY.fullmatch(name) is not None or (
        in_run and _EARLIER_TEMPORARY.fullmatch(name) is not None)


_HOST = re.sub(r"[^A-Za-z0-9_]", "_", os.uname().nodename)[:32] or "host"
_MADE_HERE = set()  # the temporaries this process made (a container's pid repeats across starts)


def _temporary_prefix(path, kind=""):
    return f".{Path(path).name}{TEMPORARY_INFIX}{os.getpid()}-{_HOST}-{kind}"


def _made(temporary):
    _MADE_HERE.add(str(temporary))
    return temporary


def remove_dead_temporaries(path):
    """Delete the temporaries beside `path` that a process of nash_jax's on this host, killed while
    writing `path`, left (their names carry its pid and host, and no such process lives now); returns
    how many. A live writer's temporaries, another host's, and any other name stay."""
    path, removed = Path(path), 0
    if not path.parent.is_dir():
        return 0
    prefix = f".{path.name}{TEMPORARY_INFIX}"
    for p in path.parent.iterdir():
        pid, _, rest = p.name[len(prefix):].partition("-") if p.name.startswith(prefix) else ("", "", "")
        if (is_own_temporary(p.name) and pid.isdigit() and rest.startswith(f"{_HOST}-")
                and not _writing(int(pid), p)):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed += 1
    return removed


def _writing(pid, temporary):
    """Whether process `pid` of this host may still be writing `temporary`."""
    if pid == os.getpid():
        return str(temporary) in _MADE_HERE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@contextlib.contextmanager
def parents_made_for(path):
    """Make `path`'s missing parent directories; if the block fails, remove those of them that are
    still empty, so that a failed write leaves the tree as it found it."""
    path = Path(path)
    missing = [p for p in path.parents if not p.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        for p in missing:  # deepest first
            with contextlib.suppress(OSError):
                p.rmdir()
        raise


@contextlib.contextmanager
def scratch_beside(path):
    """A temporary directory beside `path` (named as this module's temporaries are, so that a rerun
    after a kill removes it), deleted on leaving; stale ones of dead writers are removed first."""
    path = Path(path)
    with parents_made_for(path):
        remove_dead_temporaries(path)
        scratch = _made(Path(tempfile.mkdtemp(dir=path.parent, suffix=".tmp",
                                              prefix=_temporary_prefix(path, "scratch-"))))
        try:
            yield scratch
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def reading_text(path):
    """Within: a UnicodeDecodeError (of reading `path`) becomes one ValueError naming the file."""
    try:
        yield
    except UnicodeDecodeError as err:
        bad = err.object[err.start:err.start + 4]
        raise ValueError(f"{path} is not UTF-8 text ({err.reason} at {bad!r}); expected a UTF-8 "
                         "file") from None


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
    _made(tmp)
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


# Every directory write_dir_atomically makes holds this file: the proof that nash_jax wrote it, so that
# a later write (a redone stage, `--overwrite`) may replace it, and never a directory of the user's.
DIR_MARKER = ".nash-jax"


def written_dir(path):
    """Whether `path` is a directory that write_dir_atomically made (not a link to one)."""
    path = Path(path)
    return path.is_dir() and not path.is_symlink() and (path / DIR_MARKER).is_file()


def check_output(path, flag, *, overwrite=False, written=written_dir, directory=True):
    """Refuse (ValueError, one line) to write to `path` unless it is new (or, for a directory, an
    empty one) or, with `overwrite`, something nash_jax wrote there before: `written(path)` says
    which (by default a directory holding DIR_MARKER). `flag` names the path in the message."""
    path = Path(path)
    if not os.path.lexists(path) or (directory and _empty_dir(path)):
        return
    kind = "link" if path.is_symlink() else "directory" if path.is_dir() else "file"
    if not written(path):
        ours = f"a directory nash_jax wrote (one holding {DIR_MARKER})" if directory else \
            "a file nash_jax wrote"
        raise ValueError(f"{flag} {path}: a {kind} is there and it is not {ours}; refusing to replace "
                         "it: choose a new path")
    if not overwrite:
        raise ValueError(f"{flag} {path}: nash_jax wrote this {kind} before; pass --overwrite to "
                         "replace it, or choose a new path")


def _in_run_dir(path):
    return path.is_dir() and not path.is_symlink()


def _empty_dir(path):
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


def write_dir_atomically(path, write, *, in_run=False):
    """Call write(tmp_dir) on a fresh directory beside `path`, mark it as nash_jax's (DIR_MARKER), then
    swap it into place (on every process that calls it: multi-process callers call it on process 0
    only). `path` must be new, an empty directory, or a directory this function wrote: anything else
    is refused (ValueError) before anything is written. in_run: `path` is an artifact inside a run
    directory whose lock the caller holds, which proves the directory is nash_jax's even without the
    marker (an earlier version wrote none), so it is replaced too."""
    path = Path(path)
    check_output(path, "output", overwrite=True, written=_in_run_dir if in_run else written_dir)
    with parents_made_for(path):
        if not in_run:  # (a run directory sweeps its own, under its lock)
            remove_dead_temporaries(path)
        tmp = _made(Path(tempfile.mkdtemp(dir=path.parent, prefix=_temporary_prefix(path),
                                          suffix=".tmp")))
        try:
            write(tmp)
            (tmp / DIR_MARKER).write_text("written by nash_jax: a later write may replace this "
                                          "directory\n")
            os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    # The old directory is renamed aside, not deleted, before the new one takes its name: a kill in
    # between leaves a stale temporary (removed on resumption), never a half-deleted directory. An
    # empty directory is renamed over (rename(2) refuses one that has filled up meanwhile).
    old = None
    if written_dir(path) or (in_run and _in_run_dir(path)):
        old = _made(Path(tempfile.mkdtemp(dir=path.parent, prefix=_temporary_prefix(path, "old-"),
                                          suffix=".tmp")))
        os.replace(path, old / path.name)
    os.replace(tmp, path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
