"""The sandbox on bubblewrap against hostile tests, run by this process (root or not) and, when this
process is root, by an ordinary user made for it: nothing reaches the host's loopback, files, environment
or processes, nothing outlives the run, and every limit holds; `isolation=required` stops in one line
where bubblewrap cannot make its namespaces, and best_effort names what is off."""

import dataclasses
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from nash_jax.sandbox import bwrap, sandbox
from nash_jax.sandbox.sandbox import SandboxLimits, SandboxUnavailable, run_tests

ROOT = Path(__file__).resolve().parents[3]
USER = "nashjax-sandbox-test"
TIGHT = {"wall_s": 20, "cpu_s": 10, "memory_bytes": 256 << 20, "output_bytes": 64 << 10,
         "processes": 32}
SHORT_WALL = {**TIGHT, "wall_s": 3, "cpu_s": 2}
ISOLATED = sandbox.protections()["user_namespace"]

# run_tests as another user: its result (or the ValueError it raised) as one JSON line
_AS_USER = """
import json, sys
from nash_jax.sandbox.sandbox import SandboxLimits, run_tests
args = json.loads(sys.argv[1])
try:
    run = run_tests(args["repo"], args["files"], SandboxLimits(**args["limits"]))
except ValueError as err:
    print(json.dumps({"error": str(err)}))
else:
    print(json.dumps({"outcomes": run.outcomes, "limit_hit": run.limit_hit, "problem": run.problem,
                      "seconds": run.seconds, "output": run.output[-4000:]}))
"""


def _unreachable(user):
    """(folder others may not enter, its child the interpreter needs) pairs for `user`."""
    pairs = set()
    for path in {Path(os.path.realpath(p)) for p in (sys.prefix, sys.base_prefix)}:
        for folder in reversed(path.parents):
            if not os.stat(folder).st_mode & 0o001:
                pairs.add((str(folder), str(folder / path.relative_to(folder).parts[0])))
                break
    return sorted(pairs)


def _user_prefix(user, stage):
    """The command prefix that runs a command as `user`, in a private mount namespace where the
    folders on the interpreter's path that others may not enter hold only the interpreter (bound
    there through the empty folder `stage`)."""
    pairs = _unreachable(user)
    if not pairs:
        return ["runuser", "-u", user, "--"]
    script = []
    for number, (hidden, kept) in enumerate(pairs):
        script += [f"mkdir -p {stage}/{number}", f"mount --bind {kept} {stage}/{number}"]
    for number, (hidden, kept) in enumerate(pairs):
        script += [f"mount -t tmpfs -o mode=755 tmpfs {hidden}", f"mkdir -p {kept}",
                   f"mount --move {stage}/{number} {kept}"]
    script.append(f'exec runuser -u {user} -- "$@"')
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", " && ".join(script), "sh"]


class Runner:
    """Runs a repository's tests in the sandbox as this process, or as an ordinary user."""

    def __init__(self, user=None):
        self.user = user
        self.made = []

    def folder(self, tmp_path):
        if self.user is None:
            return tmp_path
        folder = Path(tempfile.mkdtemp(prefix="nash-jax-user-"))
        self.made.append(folder)
        shutil.chown(folder, self.user, self.user)
        folder.chmod(0o755)
        return folder

    def own(self, path):
        if self.user is not None:
            for folder, names, files in os.walk(path):
                for name in [folder, *(os.path.join(folder, n) for n in names + files)]:
                    shutil.chown(name, self.user, self.user)

    def run(self, repo, files, limits, env=()):
        """{"outcomes", "limit_hit", "problem", "seconds", "output"} or {"error"}."""
        if self.user is None:
            try:
                run = run_tests(repo, files, SandboxLimits(**limits))
            except ValueError as err:
                return {"error": str(err)}
            return {"outcomes": run.outcomes, "limit_hit": run.limit_hit, "problem": run.problem,
                    "seconds": run.seconds, "output": run.output}
        self.own(repo)
        path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
        stage = tempfile.mkdtemp(prefix="nash-jax-stage-")
        self.made.append(Path(stage))
        command = [*_user_prefix(self.user, stage), "env", f"PYTHONPATH={path}",
                   *(f"{k}={v}" for k, v in env), sys.executable, "-c", _AS_USER,
                   json.dumps({"repo": str(repo), "files": list(files), "limits": limits})]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stdout.strip(), done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])


def _make_user():
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        USER], check=True, capture_output=True)
    return USER


def _runners():
    yield pytest.param(Runner(), id="root" if os.geteuid() == 0 else "user")
    reason = ("this process is an ordinary user already (the `user` case)" if os.geteuid() != 0
              else "needs useradd, runuser and unshare" if not all(
                  shutil.which(tool) for tool in ("useradd", "runuser", "unshare")) else None)
    yield pytest.param("as_user", id="ordinary_user",
                       marks=pytest.mark.skipif(reason is not None, reason=reason or ""))


@pytest.fixture(params=list(_runners()))
def runner(request):
    chosen = Runner(_make_user()) if request.param == "as_user" else request.param
    yield chosen
    for folder in chosen.made:
        shutil.rmtree(folder, ignore_errors=True)


def threat(base, body, name="test_threat.py", extra=None):
    """A repository in `base` whose one test does `body`."""
    folder = base / "repo"
    folder.mkdir()
    (folder / name).write_text("import os, signal, socket, sys, time\n\n\ndef test_threat():\n"
                               + textwrap.indent(textwrap.dedent(body), "    "))
    for relative, text in (extra or {}).items():
        (folder / relative).write_text(text)
    return folder


def test_no_connection_reaches_a_listener_on_the_host_s_loopback(runner, tmp_path):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        body = f"socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'leak')\n"
        result = runner.run(threat(runner.folder(tmp_path), body), ["test_threat.py"], TIGHT)
        assert result.get("outcomes") == {"test_threat.py::test_threat": "failed"}, result
        with pytest.raises(socket.timeout):
            listener.accept()


def test_no_file_is_written_outside_the_private_tmp_and_the_copy(runner, tmp_path):
    mark = uuid.uuid4().hex
    targets = [f"/tmp/nash-jax-escape-{mark}", f"/var/tmp/nash-jax-escape-{mark}",
               f"/dev/shm/nash-jax-escape-{mark}"]
    folder = runner.folder(tmp_path) / "repo"
    targets.append(str(folder / "escaped"))
    body = (f"for target in {targets!r}:\n"
            "    try:\n"
            "        open(target, 'w').write('x')\n"
            "    except OSError:\n"
            "        pass\n"
            "open('/tmp/inside', 'w').write('x')\n"
            "open('written_in_the_copy', 'w').write('x')\n")
    threat(folder.parent, body)
    try:
        result = runner.run(folder, ["test_threat.py"], TIGHT)
        assert result.get("outcomes") == {"test_threat.py::test_threat": "passed"}, result
        assert [target for target in targets if os.path.exists(target)] == []
        assert sorted(p.name for p in folder.iterdir()) == ["test_threat.py"]
    finally:
        for target in targets:
            Path(target).unlink(missing_ok=True)


def test_the_caller_s_secret_is_not_in_the_environment_nor_in_any_proc_environ(runner, tmp_path,
                                                                             monkeypatch):
    secret = "hunter2-" + uuid.uuid4().hex
    monkeypatch.setenv("NASH_JAX_SECRET_TOKEN", secret)
    body = (f"assert not any({secret!r} in value for value in os.environ.values())\n"
            "for entry in os.listdir('/proc'):\n"
            "    try:\n"
            "        data = open(f'/proc/{entry}/environ', 'rb').read()\n"
            "    except OSError:\n"
            "        continue\n"
            f"    assert {secret.encode()!r} not in data, entry\n")
    result = runner.run(threat(runner.folder(tmp_path), body), ["test_threat.py"], TIGHT,
                        env=[("NASH_JAX_SECRET_TOKEN", secret)])
    assert result.get("outcomes") == {"test_threat.py::test_threat": "passed"}, result


def test_a_host_file_outside_the_repository_is_not_visible(runner, tmp_path):
    base = runner.folder(tmp_path)
    host_file = base / "host_secret.txt"
    host_file.write_text("host data")
    host_file.chmod(0o644)
    body = f"assert not os.path.exists({str(host_file)!r})\nassert not os.path.exists('/etc/passwd')\n"
    result = runner.run(threat(base, body), ["test_threat.py"], TIGHT)
    assert result.get("outcomes") == {"test_threat.py::test_threat": "passed"}, result


def test_a_file_only_its_owner_may_read_is_refused_by_name(runner, tmp_path):
    body = "assert open('private.txt').read() != 'secret'\n"
    folder = threat(runner.folder(tmp_path), body, extra={"private.txt": "secret"})
    (folder / "private.txt").chmod(0o600)
    result = runner.run(folder, ["test_threat.py"], TIGHT)
    if "error" in result:
        assert "private.txt" in result["error"] and "only their owner" in result["error"], result
    else:
        assert result.get("outcomes") == {"test_threat.py::test_threat": "passed"}, result


def test_a_double_forked_setsid_child_does_not_outlive_the_run(runner, tmp_path):
    base = runner.folder(tmp_path)
    late = base / "written_late"
    mark = "nash-jax-orphan-" + uuid.uuid4().hex
    orphan = f"import time; time.sleep(5); open({str(late)!r}, 'w').write('x')"
    body = ("if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            f"        os.execv(sys.executable, [sys.executable, '-c', {orphan!r}, {mark!r}])\n"
            "    os._exit(0)\n"
            "time.sleep(0.3)\n")
    result = runner.run(threat(base, body), ["test_threat.py"], TIGHT)
    assert result.get("outcomes") == {"test_threat.py::test_threat": "passed"}, result
    # bwrap returns the run's status as soon as its PID 1 has it; the kernel then kills the namespace's
    # other processes within moments, not in the same instant
    deadline = time.monotonic() + 2
    while _processes_with(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_with(mark) == []
    time.sleep(6)
    assert not late.exists()


def _processes_with(mark):
    found = []
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and mark.encode() in Path(entry.path, "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def test_kill_minus_one_inside_kills_nothing_outside(runner, tmp_path):
    prefix = [] if runner.user is None else ["runuser", "-u", runner.user, "--"]
    sentinel = subprocess.Popen([*prefix, "sleep", "60"])  # a process of the caller's uid
    try:
        time.sleep(0.2)
        body = "os.kill(-1, signal.SIGKILL)\ntime.sleep(1)\n"
        result = runner.run(threat(runner.folder(tmp_path), body), ["test_threat.py"], TIGHT)
        assert "error" not in result, result  # the caller survived to say how its run ended
        assert sentinel.poll() is None, "kill(-1) inside the sandbox killed a process outside"
    finally:
        sentinel.kill()
        sentinel.wait()


@pytest.mark.parametrize("body, limits, expected", [
    ("while True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", SHORT_WALL,
     ("processes", "wall", "cpu")),
    ("while True:\n    pass\n", {**TIGHT, "cpu_s": 1}, ("cpu",)),
    ("time.sleep(1000)\n", SHORT_WALL, ("wall",)),
    ("chunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    print(chunk)\n", TIGHT, ("output",)),
    ("hoard = bytearray(1 << 40)\n", TIGHT, ("memory",)),
], ids=["fork_bomb", "cpu_loop", "sleep", "gigabyte_of_output", "huge_allocation"])
def test_each_limit_holds(runner, tmp_path, body, limits, expected):
    result = runner.run(threat(runner.folder(tmp_path), body), ["test_threat.py"], limits)
    assert result.get("limit_hit") in expected, result
    assert result["seconds"] < limits["wall_s"] + 3, result


def _failing_bwrap(tmp_path, monkeypatch):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(bwrap, "bwrap_binary", lambda: str(fake))
    sandbox._probe.cache_clear()


@pytest.fixture
def without_namespaces(tmp_path, monkeypatch):
    _failing_bwrap(tmp_path, monkeypatch)
    yield
    sandbox._probe.cache_clear()


def test_required_isolation_stops_in_one_line_before_anything_runs(tmp_path, without_namespaces):
    ran = tmp_path / "ran"
    folder = threat(tmp_path, f"open({str(ran)!r}, 'w').write('x')\n")
    with pytest.raises(SandboxUnavailable) as raised:
        run_tests(folder, ["test_threat.py"], SandboxLimits(**TIGHT))
    message = str(raised.value)
    assert "\n" not in message and "Permission denied" in message, message
    assert "user namespaces" in message and "isolation=best_effort" in message, message
    assert not ran.exists()


def test_best_effort_runs_and_names_every_protection_that_is_off(tmp_path, without_namespaces):
    line = sandbox.require("best_effort")
    given = sandbox.protections()
    off = {name for name, on in given.items() if on is False}
    assert off == set(sandbox.NAMESPACED), given
    assert all(name in line for name in off) and "\n" not in line, line
    folder = threat(tmp_path, "assert 'NASH_JAX_SECRET_TOKEN' not in os.environ\n")
    run = run_tests(folder, ["test_threat.py"], SandboxLimits(**TIGHT, isolation="best_effort"))
    assert run.outcomes == {"test_threat.py::test_threat": "passed"}, run.output
    assert {name for name, on in run.protections.items() if on is False} == off


@pytest.mark.skipif(not ISOLATED, reason="bubblewrap cannot make its namespaces on this machine")
def test_this_machine_gives_every_protection():
    given = sandbox.protections()
    assert {name for name, on in given.items() if on is False} == set(), given
