"""Run a repository's pytest files on a fresh copy of it, under limits, where the code cannot reach out.

Each run copies the repository into a new temporary directory (removed afterwards) and starts
`python -m pytest -q -p no:cacheprovider --junitxml=... FILES` with the host's interpreter, in its own
session, with a scrubbed environment and rlimits (CPU time, address space, processes, file size, open
files, no core dumps); the wall-clock limit and the output cap are enforced from here by killing the
whole process group. Where the machine allows it (util-linux `unshare` as root, probed once), the run
also gets new network, mount and PID namespaces: only a down loopback, every mount read-only but a
private /tmp (a size-limited tmpfs holding the copy, which vanishes with the run), and every
descendant killed when the namespace's init (sandbox_init, which makes that view) dies. Root drops
to a dedicated unprivileged uid (no groups, no capabilities, no_new_privs) before pytest starts, so
that RLIMIT_NPROC counts and nothing can be remounted. `TestRun.protections` says which of these
were active.

Outcomes per test come from pytest's own JUnit report, never from what the tests print.
"""

import functools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from nash_jax.sandbox.sandbox_report import junit_outcomes

# Inside the namespaces the first process is sandbox_init (the filesystem view, then pytest as the
# unprivileged uid); unshare's --kill-child takes it, and so the whole namespace, down with unshare.
_INIT = str(Path(__file__).with_name("sandbox_init.py"))
_UNSHARE = ("unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc")

# The only variables a sandboxed run sees (no JAX/XLA/HF/proxy/credential variables of the host's).
_PATH = "/usr/local/bin:/usr/bin:/bin"

# Unprivileged uids for sandboxed runs: one per host process, so that RLIMIT_NPROC (counted per uid)
# of one run is not spent by another helper's runs, and no real account's files are reachable.
_UID_BASE, _UID_SPAN = 200_000, 60_000


@dataclass(frozen=True)
class SandboxLimits:
    """What one test run may use; any limit reached makes the run invalid (`TestRun.limit_hit`)."""
    wall_s: float = 30.0
    cpu_s: int = 20
    memory_bytes: int = 1 << 30  # RLIMIT_AS, per process
    output_bytes: int = 1 << 20  # stdout + stderr read before the run is killed
    processes: int = 64  # RLIMIT_NPROC for the sandbox's uid (only with the uid drop)
    file_bytes: int = 16 << 20  # RLIMIT_FSIZE
    open_files: int = 256
    tmp_bytes: int = 64 << 20  # size of the private /tmp (namespaces only)

    def __post_init__(self):
        for name in ("wall_s", "cpu_s", "memory_bytes", "output_bytes", "processes", "file_bytes",
                     "open_files", "tmp_bytes"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"SandboxLimits.{name}={value!r}; expected a positive number")


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
    `repo_dir`; returns a TestRun. The copy is removed afterwards, whatever the tests did.

    One run at a time per process: runs share the process's sandbox uid, and each ends by killing
    everything that uid runs (validate artifacts concurrently in separate processes)."""
    repo_dir = Path(repo_dir)
    if not repo_dir.is_dir():
        raise ValueError(f"repository {repo_dir} is not a directory; expected a folder of Python "
                         "files and their pytest files")
    files = tuple(str(name) for name in test_files)
    box = Path(tempfile.mkdtemp(prefix="nash-jax-sandbox-"))
    try:
        return _run_in_box(box, repo_dir, files, limits)
    finally:
        shutil.rmtree(box, ignore_errors=True)


def protections():
    """The protections this machine gives a sandboxed run (probed once per process)."""
    return dict(_probe())


def _run_in_box(box, repo_dir, files, limits):
    shutil.copytree(repo_dir, box / "work", symlinks=True)
    (box / "report").mkdir()
    (box / "tmp").mkdir()
    probe = _probe()
    uid = _sandbox_uid() if probe["unprivileged_uid"] else None
    if uid is not None and not probe["network_namespace"]:
        # without namespaces the uid works in the host's copy, reached through the box
        for path in (box / "work", box / "report", box / "tmp"):
            _chown_tree(path, uid)
        os.chmod(box, 0o711)
    command, inside = _command(box, files, limits, uid, namespaces=probe["network_namespace"])
    start = time.monotonic()
    returncode, output, limit, cpu_s = _supervise(command, limits, uid=uid,
                                                  namespaces=probe["network_namespace"],
                                                  env=_environment(inside),
                                                  cwd=box if probe["network_namespace"] else inside["cwd"])
    if uid is not None:
        _reap(uid)
    seconds = time.monotonic() - start
    limit = limit or _limit_from_status(returncode, cpu_s, limits)
    outcomes, problem = {}, None
    if limit is None:
        outcomes, problem, limit = junit_outcomes(box / "report" / "junit.xml", returncode)
    return TestRun(outcomes=outcomes if limit is None else {}, returncode=returncode,
                   seconds=seconds, protections=dict(probe), limit_hit=limit, problem=problem,
                   output=output, files=files)


def _command(box, files, limits, uid, *, namespaces):
    """The command line and the paths the run sees (inside the namespace: /tmp/work, /tmp/report)."""
    root = Path("/tmp") if namespaces else box
    inside = {"cwd": str(root / "work"), "home": str(root / "tmp") if not namespaces else "/tmp",
              "tmp": str(root / "tmp") if not namespaces else "/tmp"}
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
              "-o", "junit_family=xunit1",
              "--continue-on-collection-errors", f"--junitxml={root / 'report' / 'junit.xml'}",
              f"--rootdir={inside['cwd']}", "--", *files]
    if not namespaces:
        return pytest, inside
    return [*_namespace_command(box, limits.tmp_bytes, uid), *pytest], inside


def _namespace_command(box, tmp_bytes, uid):
    kept, hidden = _interpreter_folders()
    setup = {"box": str(box), "tmp_bytes": tmp_bytes, "uid": uid, "kept": kept, "hidden": hidden,
             "kept_in_tmp": _interpreter_folders_in_tmp()}
    return [*_UNSHARE, sys.executable, "-I", "-S", _INIT, json.dumps(setup)]


@functools.cache
def _interpreter_folders():
    """(folders to keep, folders to hide): where the interpreter (its prefix, base prefix, the real
    executable's folder) lies below a folder others may not enter, that folder is hidden and the
    interpreter's child of it kept, so that the unprivileged uid reaches the interpreter and nothing
    else there."""
    needed = {Path(os.path.realpath(sys.prefix)), Path(os.path.realpath(sys.base_prefix)),
              Path(os.path.realpath(sys.executable)).parent}
    kept, hidden = set(), set()
    for path in needed:
        for folder in reversed(path.parents):
            if not os.stat(folder).st_mode & 0o001:
                hidden.add(str(folder))
                kept.add(str(folder / path.relative_to(folder).parts[0]))
                break
    return sorted(kept), sorted(hidden)


@functools.cache
def _interpreter_folders_in_tmp():
    """The interpreter's folders that lie below /tmp (a virtual environment made there), which the
    private /tmp would cover: sandbox_init binds each back, read-only, at its place."""
    needed = {Path(os.path.realpath(sys.prefix)), Path(os.path.realpath(sys.base_prefix)),
              Path(os.path.realpath(sys.executable)).parent}
    return sorted(str(p) for p in needed if Path("/tmp") in p.parents)


def _environment(inside):
    return {"PATH": _PATH, "HOME": inside["home"], "TMPDIR": inside["tmp"], "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def _supervise(command, limits, *, uid, namespaces, env, cwd):
    """Start `command` in its own session under the rlimits; read its output until it ends, the wall
    limit passes or the output cap is reached (then kill the whole group). Returns (exit status as
    subprocess gives it, the output's head as text, "wall"/"output"/None, CPU seconds used).

    The rlimits are set by util-linux `prlimit` and the uid drop (without namespaces; inside them
    sandbox_init drops after the mounts) by Popen itself, not by a preexec_fn: the host process runs
    JAX's threads, and a preexec_fn may deadlock a child forked beside them."""
    drop = {} if namespaces or uid is None else {"user": uid, "group": uid, "extra_groups": []}
    process = subprocess.Popen([*_prlimit(limits), *command], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                               start_new_session=True, **drop)
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


def _prlimit(limits):
    cpu = int(limits.cpu_s)
    return ["prlimit", f"--cpu={cpu}:{cpu + 1}", f"--as={limits.memory_bytes}",
            f"--nproc={limits.processes}", f"--fsize={limits.file_bytes}",
            f"--nofile={limits.open_files}", "--core=0", "--"]


def _kill_group(pid):
    # The whole session: unshare, the namespace's init (which takes every descendant with it) or, without
    # namespaces, pytest and whatever it started in its group.
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap(uid):
    """Kill whatever the run's uid still runs (orphans the PID namespace's end has not yet taken, or,
    without one, processes that left the group) and wait until they are gone: kill(-1) as that uid
    reaches exactly its processes."""
    subprocess.run(["kill", "-KILL", "-1"], user=uid, group=uid, extra_groups=[],
                   stdin=subprocess.DEVNULL, capture_output=True, env={"PATH": _PATH}, check=False)
    deadline = time.monotonic() + 5
    while processes_of(uid) and time.monotonic() < deadline:
        time.sleep(0.01)


def processes_of(uid):
    """Process ids whose owner is `uid` (from /proc)."""
    found = []
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and entry.stat(follow_symlinks=False).st_uid == uid:
                found.append(int(entry.name))
        except FileNotFoundError:
            pass
    return found


_SIGNALLED = {signal.SIGXCPU: "cpu", signal.SIGXFSZ: "file_size"}


def _limit_from_status(returncode, cpu_s, limits):
    """Which rlimit ended the run, from its exit status: killed by SIGXCPU/SIGXFSZ (a negative status,
    or 128 + the signal from sandbox_init), or by SIGKILL once its CPU time reached the limit."""
    if returncode is None:
        return None
    number = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    if number in _SIGNALLED:
        return _SIGNALLED[number]
    if number == signal.SIGKILL and cpu_s >= limits.cpu_s:
        return "cpu"
    return None


def _sandbox_uid():
    return _UID_BASE + os.getpid() % _UID_SPAN


def _chown_tree(path, uid):
    os.chown(path, uid, uid, follow_symlinks=False)
    for folder, names, files in os.walk(path):
        for name in names + files:
            os.chown(os.path.join(folder, name), uid, uid, follow_symlinks=False)


@functools.cache
def _probe():
    """Try the namespaces once with a trivial command; what works decides every later run."""
    if shutil.which("prlimit") is None:
        raise ValueError("the sandbox needs util-linux `prlimit` on PATH to set its rlimits; "
                         "expected it in /usr/bin (Debian/Ubuntu package util-linux)")
    root = os.geteuid() == 0
    namespaces = root and shutil.which("unshare") is not None and _namespaces_work()
    # Without namespaces the uid drop needs an interpreter that other users may reach.
    reachable = namespaces or not _interpreter_folders()[1]
    return {"network_namespace": namespaces, "read_only_root": namespaces, "private_tmp": namespaces,
            "pid_namespace": namespaces, "unprivileged_uid": root and reachable,
            "process_group": True, "scrubbed_environment": True,
            "rlimits": ["cpu", "address_space", "processes", "file_size", "open_files", "core"],
            "wall_limit": True, "output_cap": True}


def _namespaces_work():
    """The view builds, the uid cannot write the root, and the report comes back."""
    box = Path(tempfile.mkdtemp(prefix="nash-jax-sandbox-probe-"))
    try:
        for name in ("work", "report", "tmp"):
            (box / name).mkdir()
        check = ("import os\ntry:\n    open('/nash-jax-probe', 'w')\nexcept OSError:\n"
                 "    open('/tmp/report/junit.xml', 'w').write('<ok/>')\n")
        command = [*_namespace_command(box, 1 << 20, _sandbox_uid()), sys.executable, "-c", check]
        try:
            done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, timeout=30,
                                  env={"PATH": _PATH})
        except (OSError, subprocess.TimeoutExpired):
            return False
        report = box / "report" / "junit.xml"
        return done.returncode == 0 and report.is_file() and report.read_text() == "<ok/>"
    finally:
        shutil.rmtree(box, ignore_errors=True)
