"""Run a repository's pytest files on a fresh copy of it, under limits, where the code cannot reach out.

Each run starts `python -m pytest -q -p no:cacheprovider --junitxml=... FILES` with the host's
interpreter inside bubblewrap (sandbox.bwrap): new user, PID, network, mount, IPC and UTS namespaces
(an unprivileged uid inside, for root too), a root that holds only the interpreter, the repository
(read-only, copied into a private size-limited /tmp) and a minimal /dev and /proc; a cleared
environment but for a few scrubbed variables; rlimits (CPU time, address space, processes, file size,
open files, no core dumps) and a process count, set inside by sandbox_init; the wall-clock limit and
the output cap enforced from here by killing bwrap, which takes the namespace and everything in it
down with it. `TestRun.protections` says which of these were active.

A repository holding a file only its owner may read is refused by name: inside, the tests would read
it as that owner.

`SandboxLimits.isolation` says what a run needs: "required" (the default) stops with one line before
anything runs where bubblewrap cannot make its namespaces here (user namespaces disabled, a seccomp
filter); "best_effort" then runs sandbox_init on the host, with the rlimits, the scrubbed environment,
its own session and the wall and output limits only, and the protections say which are off.

Outcomes per test come from pytest's own JUnit report, never from what the tests print.
"""

import functools
import importlib.util
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from nash_jax.sandbox import bwrap
from nash_jax.sandbox.sandbox_report import junit_outcomes

# The only variables a sandboxed run sees (no JAX/XLA/HF/proxy/credential variables of the host's).
_PATH = "/usr/local/bin:/usr/bin:/bin"

ISOLATION = ("required", "best_effort")
# What bubblewrap gives a run, each off without it.
NAMESPACED = ("user_namespace", "pid_namespace", "network_namespace", "mount_namespace",
              "ipc_namespace", "uts_namespace", "minimal_root", "private_tmp", "unprivileged_uid",
              "die_with_run", "process_count")
RLIMITS = ["cpu", "address_space", "processes", "file_size", "open_files", "core"]


class SandboxUnavailable(ValueError):
    """The run needs isolation this machine cannot give (or pytest is missing)."""


@dataclass(frozen=True)
class SandboxLimits:
    """What one test run may use (any limit reached makes the run invalid, `TestRun.limit_hit`), and
    the isolation it requires ("required" or "best_effort", see the module's docstring)."""
    wall_s: float = 30.0
    cpu_s: int = 20
    memory_bytes: int = 1 << 30  # RLIMIT_AS, per process
    output_bytes: int = 1 << 20  # stdout + stderr read before the run is killed
    processes: int = 64  # RLIMIT_NPROC inside the user namespace, and sandbox_init's count
    file_bytes: int = 16 << 20  # RLIMIT_FSIZE
    open_files: int = 256
    tmp_bytes: int = 64 << 20  # size of the private /tmp (holds the repository's copy)
    isolation: str = "required"

    def __post_init__(self):
        for name in ("wall_s", "cpu_s", "memory_bytes", "output_bytes", "processes", "file_bytes",
                     "open_files", "tmp_bytes"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"SandboxLimits.{name}={value!r}; expected a positive number")
        if self.isolation not in ISOLATION:
            raise ValueError(f"SandboxLimits.isolation={self.isolation!r}; expected one of "
                             f"{', '.join(ISOLATION)}")


@dataclass(frozen=True)
class TestRun:
    """One sandboxed pytest run: outcome per test id ("file.py::name", "file.py::Class::name") as
    pytest's JUnit report gives it (passed/failed/error/skipped), pytest's exit status, `limit_hit`
    ("wall", "cpu", "memory", "output", "file_size") or `problem` (missing or unreadable report), the
    output's head, the seconds it took and the protections that were active."""
    __test__ = False  # not a pytest test class

    outcomes: dict
    returncode: int | None
    seconds: float
    protections: dict
    limit_hit: str | None = None
    problem: str | None = None
    output: str = ""
    files: tuple = field(default=())

    @property
    def valid(self):
        """Whether the run finished within its limits with a readable report."""
        return self.limit_hit is None and self.problem is None

    def passed(self):
        return {test for test, outcome in self.outcomes.items() if outcome == "passed"}

    def failing(self):
        """Tests that failed or raised an error (collection errors included)."""
        return {test for test, outcome in self.outcomes.items() if outcome in ("failed", "error")}

    def summary(self):
        counts = {}
        for outcome in self.outcomes.values():
            counts[outcome] = counts.get(outcome, 0) + 1
        return {"seconds": round(self.seconds, 3), "returncode": self.returncode, **counts,
                "limit_hit": self.limit_hit, "problem": self.problem}


def run_tests(repo_dir, test_files, limits=SandboxLimits()):
    """Run pytest on `test_files` (paths relative to the repository) in a fresh sandboxed copy of
    `repo_dir`; returns a TestRun. The copy is gone afterwards, whatever the tests did."""
    repo_dir = Path(repo_dir)
    if not repo_dir.is_dir():
        raise ValueError(f"repository {repo_dir} is not a directory; expected a folder of Python "
                         "files and their pytest files")
    _refuse_private_files(repo_dir)
    require(limits.isolation)
    files = tuple(str(name) for name in test_files)
    box = Path(tempfile.mkdtemp(prefix="nash-jax-sandbox-"))
    try:
        return _run_in_box(box, repo_dir, files, limits)
    finally:
        shutil.rmtree(box, ignore_errors=True)


def protections():
    """The protections this machine gives a sandboxed run (probed once per process): each True or
    False, and the rlimits' names."""
    return dict(_probe()[0])


def require(isolation="required", opt_out="isolation=best_effort"):
    """Whether a run under `isolation` may start here: None when every protection is on; the one
    start-up line naming what is off under best_effort; SandboxUnavailable (one line, naming what
    failed and the two ways on, `opt_out` the caller's spelling of best_effort) under required."""
    given, reason = _probe()
    if reason is None:
        return None
    off = ", ".join(name for name, on in given.items() if on is False)
    if isolation == "required":
        raise SandboxUnavailable(
            f"the sandbox cannot isolate policy code on this machine: {reason}; enable unprivileged "
            f"user namespaces (sysctl user.max_user_namespaces>0 and kernel.unprivileged_userns_clone"
            f"=1, or a container profile that allows them), or set {opt_out} to run without: {off}")
    return f"sandbox: isolation=best_effort, {reason}; running policy code without: {off}"


@functools.cache
def _probe():
    """(protections, None or why bubblewrap cannot make its namespaces here), once per process."""
    if importlib.util.find_spec("pytest") is None:
        raise SandboxUnavailable("the sandbox runs tests with pytest, which is not installed in "
                                 f"{sys.prefix}; pip install pytest")
    reason = bwrap.probe()
    on = reason is None
    return {**{name: on for name in NAMESPACED}, "new_session": True, "scrubbed_environment": True,
            "rlimits": list(RLIMITS), "wall_limit": True, "output_cap": True}, reason


def _refuse_private_files(repo_dir):
    """A file or folder others may not read would be readable inside (the tests run as its owner)."""
    private = []
    for folder, names, files in os.walk(repo_dir):
        for name in names + files:
            info = os.lstat(os.path.join(folder, name))
            need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(info.st_mode) else 0)
            if not stat.S_ISLNK(info.st_mode) and info.st_mode & need != need:
                private.append(os.path.relpath(os.path.join(folder, name), repo_dir))
    if private:
        raise ValueError(f"repository {repo_dir} holds {', '.join(sorted(private))}, which only "
                         "their owner may read; the sandbox does not copy them (its tests would read "
                         "them as that owner); expected every file readable by others (chmod o+r) or "
                         "kept out of the repository")


def _run_in_box(box, repo_dir, files, limits):
    namespaces = _probe()[1] is None
    setup, inside = _setup(box, repo_dir, files, limits, namespaces)
    env = _environment(inside)
    with open(box / "junit.xml", "xb") as report, open(box / "status.json", "xb") as status:
        setup.update(report_fd=report.fileno(), status_fd=status.fileno())
        command = (bwrap.command(repo_dir, limits.tmp_bytes, env, json.dumps(setup)) if namespaces
                   else bwrap.init_command(json.dumps(setup)))
        start = time.monotonic()
        returncode, output, limit, cpu_s = _supervise(
            command, limits, env={"PATH": _PATH} if namespaces else env, cwd=box,
            fds=(report.fileno(), status.fileno()), leftovers=not namespaces)
    seconds = time.monotonic() - start
    ended = _read_status(box / "status.json")
    if ended is not None:
        returncode, limit = ended["returncode"], limit or ended["limit"]
    limit = limit or _limit_from_status(returncode, cpu_s, limits)
    outcomes, problem = {}, None
    if limit is None:
        outcomes, problem, limit = junit_outcomes(box / "junit.xml", returncode)
    return TestRun(outcomes=outcomes if limit is None else {}, returncode=returncode,
                   seconds=seconds, protections=protections(), limit_hit=limit, problem=problem,
                   output=output, files=files)


def _setup(box, repo_dir, files, limits, namespaces):
    """sandbox_init's setup and the paths the run sees (inside the namespaces, or the box's)."""
    if namespaces:
        inside = {"source": bwrap.SOURCE, "work": bwrap.WORK, "report": bwrap.REPORT, "tmp": "/tmp"}
    else:
        (box / "tmp").mkdir()
        inside = {"source": str(repo_dir), "work": str(box / "work"),
                  "report": str(box / "report" / "junit.xml"), "tmp": str(box / "tmp")}
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
              "-o", "junit_family=xunit1", "--continue-on-collection-errors",
              f"--junitxml={inside['report']}", f"--rootdir={inside['work']}", "--", *files]
    limit_names = ("cpu_s", "memory_bytes", "processes", "file_bytes", "open_files")
    setup = {"source": inside["source"], "work": inside["work"], "report": inside["report"],
             "command": pytest, "pid_namespace": namespaces,
             "limits": {name: int(getattr(limits, name)) for name in limit_names}}
    return setup, inside


def _read_status(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # sandbox_init was killed before it wrote its status


def _environment(inside):
    return {"PATH": _PATH, "HOME": inside["tmp"], "TMPDIR": inside["tmp"], "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def _supervise(command, limits, *, env, cwd, fds, leftovers):
    """Start `command` in its own session; read its output until it ends, the wall limit passes or
    the output cap is reached (then kill the whole group: bwrap, whose namespace dies with it).
    Returns (exit status as subprocess gives it, the output's head as text, "wall"/"output"/None, CPU
    seconds used). `leftovers`: kill what is left of the group after the end (without namespaces,
    where nothing else takes it; the group's id stays reserved while any member lives)."""
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True,
                               pass_fds=fds)
    deadline = time.monotonic() + limits.wall_s
    output, limit = _read_output(process.stdout.fileno(), deadline, limits.output_bytes)
    if limit is not None:
        _kill_group(process.pid)
    # The output may end (every descriptor closed) while the process runs on: the wall still holds.
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline and limit is None:
            limit = "wall"
            _kill_group(process.pid)
        time.sleep(0.002)
    process.returncode = os.waitstatus_to_exitcode(status)
    process.stdout.close()
    if leftovers:
        _kill_group(process.pid)
    cpu_s = usage.ru_utime + usage.ru_stime
    return process.returncode, output.decode("utf-8", "replace"), limit, cpu_s


def _read_output(stream, deadline, cap):
    """(the first `cap` bytes read, "wall"/"output"/None) from `stream` until its end."""
    chunks, size = [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"".join(chunks), "wall"
        ready, _, _ = select.select([stream], [], [], left)
        if not ready:
            continue
        data = os.read(stream, 65536)
        if not data:
            return b"".join(chunks), None
        chunks.append(data[:max(0, cap - size)])
        size += len(data)
        if size > cap:
            return b"".join(chunks), "output"


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


_SIGNALLED = {signal.SIGXCPU: "cpu", signal.SIGXFSZ: "file_size"}


def _limit_from_status(returncode, cpu_s, limits):
    """Which rlimit ended the run, from its exit status: killed by SIGXCPU/SIGXFSZ (a negative status,
    or 128 + the signal from bwrap or sandbox_init), or by SIGKILL once its CPU time reached the
    limit."""
    if returncode is None:
        return None
    number = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    if number in _SIGNALLED:
        return _SIGNALLED[number]
    if number == signal.SIGKILL and cpu_s >= limits.cpu_s:
        return "cpu"
    return None
