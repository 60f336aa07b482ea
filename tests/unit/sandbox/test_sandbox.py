"""The sandbox: outcomes from pytest's JUnit report, and each threat stopped at its limit or contained
(nothing reaches the host), with the next run working."""

import dataclasses
import os
import shutil
import socket
import tempfile
import textwrap
from pathlib import Path

import pytest

from nash_jax.sandbox import sandbox
from nash_jax.sandbox.sandbox import SandboxLimits, run_tests
from nash_jax.sandbox.sandbox_report import junit_outcomes
from tests.unit.tasks.code import ssr_repos as repos

# Tight limits but a generous wall, so that a loaded machine does not turn a threat that should hit
# another limit (or none) into a wall-clock timeout; SHORT_WALL for the threats that end at the wall.
TIGHT = SandboxLimits(wall_s=20, cpu_s=10, memory_bytes=256 << 20, output_bytes=64 << 10,
                      processes=32)
SHORT_WALL = dataclasses.replace(TIGHT, wall_s=3, cpu_s=2)
ISOLATED = sandbox.protections()["network_namespace"]
needs_namespaces = pytest.mark.skipif(not ISOLATED, reason="bubblewrap cannot make its namespaces "
                                                           "on this machine")


def threat_repo(folder, body, name="test_threat.py"):
    """A repository whose one test does `body`."""
    return repos.make_repo(folder, {name: "import os, socket, sys, time\n\n\ndef test_threat():\n"
                                          + textwrap.indent(textwrap.dedent(body), "    ")})


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    folder = repos.make_repo(tmp_path_factory.mktemp("healthy") / "repo")

    def check():
        run = run_tests(folder, ["test_calc.py"], TIGHT)
        assert run.valid and run.passed() == {"test_calc.py::test_add", "test_calc.py::test_mul"}, \
            run.summary()
    return check


def test_outcomes_come_from_the_junit_report_not_from_what_tests_print(tmp_path):
    folder = repos.make_repo(tmp_path / "repo", {
        "test_mixed.py": textwrap.dedent("""\
            import pytest

            def test_ok():
                print("test_mixed.py::test_bad PASSED")

            def test_bad():
                print("1 passed"); assert False

            @pytest.mark.skip
            def test_skipped():
                pass

            class TestGroup:
                def test_inner(self):
                    pass
            """),
        "test_broken.py": "import not_a_module\n"})
    run = run_tests(folder, ["test_mixed.py", "test_broken.py"], TIGHT)
    assert run.valid, run.summary()
    assert run.outcomes == {"test_mixed.py::test_ok": "passed", "test_mixed.py::test_bad": "failed",
                            "test_mixed.py::test_skipped": "skipped",
                            "test_mixed.py::TestGroup::test_inner": "passed",
                            "test_broken.py": "error"}
    assert not (tmp_path / "repo" / "report").exists()  # the copy ran, not the folder itself


def test_a_missing_or_garbled_report_is_a_failed_run_with_its_reason(tmp_path):
    exits = threat_repo(tmp_path / "exits", "os._exit(0)")
    run = run_tests(exits, ["test_threat.py"], TIGHT)
    assert not run.valid and "no JUnit report" in run.problem and run.outcomes == {}
    garbled = repos.make_repo(tmp_path / "garbled", {
        "test_ok.py": "def test_ok():\n    pass\n",
        "conftest.py": "def pytest_unconfigure(config):\n"
                       "    open(config.option.xmlpath, 'w').write('<testsuites><oops')\n"})
    run = run_tests(garbled, ["test_ok.py"], TIGHT)
    assert not run.valid and "not readable XML" in run.problem
    (tmp_path / "half.xml").write_text("<testsuites><testsuite>")
    assert "not readable XML" in junit_outcomes(tmp_path / "half.xml", 0)[1]


def test_a_test_that_loops_forever_is_stopped_at_its_cpu_limit(tmp_path, healthy):
    # a wall limit well above the CPU one: on a loaded machine a CPU second takes several seconds
    limits = dataclasses.replace(TIGHT, cpu_s=1)
    run = run_tests(threat_repo(tmp_path / "repo", "while True:\n    pass\n"), ["test_threat.py"],
                    limits)
    assert run.limit_hit == "cpu" and not run.valid, run.summary()
    assert run.seconds < limits.wall_s
    healthy()


def test_a_test_that_sleeps_forever_is_stopped_at_the_wall_limit(tmp_path, healthy):
    run = run_tests(threat_repo(tmp_path / "repo", "time.sleep(1000)\n"), ["test_threat.py"],
                    SHORT_WALL)
    assert run.limit_hit == "wall", run.summary()
    assert SHORT_WALL.wall_s <= run.seconds < SHORT_WALL.wall_s + 2
    healthy()


def test_a_test_that_allocates_without_end_hits_the_memory_limit(tmp_path, healthy):
    run = run_tests(threat_repo(tmp_path / "repo", "hoard = []\nwhile True:\n"
                                                   "    hoard.append(bytearray(64 << 20))\n"),
                    ["test_threat.py"], TIGHT)
    assert run.limit_hit == "memory", run.summary()
    healthy()


def test_a_test_that_prints_without_end_is_cut_at_the_output_cap(tmp_path, healthy):
    run = run_tests(threat_repo(tmp_path / "repo", "print('x' * (1 << 20))\nassert False\n"),
                    ["test_threat.py"], TIGHT)
    assert run.limit_hit == "output", run.summary()
    assert len(run.output) <= TIGHT.output_bytes
    healthy()


@needs_namespaces
def test_a_fork_bomb_is_contained_and_leaves_no_process_behind(tmp_path, healthy):
    bomb = "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    run = run_tests(threat_repo(tmp_path / "repo", bomb), ["test_threat.py"], SHORT_WALL)
    assert run.limit_hit in ("processes", "wall", "cpu"), run.summary()
    assert run.seconds < SHORT_WALL.wall_s + 2
    healthy()


@needs_namespaces
def test_writes_outside_the_copy_do_not_survive_on_the_host(tmp_path, healthy):
    # a world-writable host folder outside /tmp: only the read-only view stops the write there
    open_host = Path(tempfile.mkdtemp(prefix="nash-jax-open-", dir="/var/tmp"))
    os.chmod(open_host, 0o777)
    folder = tmp_path / "repo"  # the repository itself, on the host
    targets = [tmp_path / "escaped", folder / "escaped", Path("/tmp/nash_jax_sandbox_escape"),
               open_host / "escaped"]
    body = (f"targets = {[str(target) for target in targets]!r}\n"
            "targets.append(os.path.join(os.path.dirname(os.getcwd()), 'escaped'))\n"
            "written = []\n"
            "for target in targets:\n"
            "    try:\n"
            "        open(target, 'w').write('x')\n"
            "        written.append(target)\n"
            "    except OSError:\n"
            "        pass\n"
            "open('/tmp/inside', 'w').write('x')  # the private /tmp takes writes\n")
    try:
        threat_repo(folder, body)
        run = run_tests(folder, ["test_threat.py"], TIGHT)
        assert run.outcomes == {"test_threat.py::test_threat": "passed"}, run.output
        assert [target for target in targets if target.exists()] == []
        assert not Path("/tmp/inside").exists()
        assert sorted(path.name for path in folder.iterdir()) == ["test_threat.py"]
    finally:
        shutil.rmtree(open_host)
    healthy()


@needs_namespaces
def test_writing_without_end_fills_only_the_private_tmpfs(tmp_path, healthy):
    body = ("import errno\n"
            "try:\n"
            "    for number in range(64):\n"
            "        open(f'filler_{number}', 'wb').write(bytes(1 << 20))\n"
            "except OSError as err:\n"
            "    assert err.errno == errno.ENOSPC, err\n"
            "else:\n"
            "    raise AssertionError('64 MiB fitted in the 8 MiB /tmp')\n")
    limits = dataclasses.replace(TIGHT, tmp_bytes=8 << 20)
    run = run_tests(threat_repo(tmp_path / "repo", body), ["test_threat.py"], limits)
    assert run.outcomes == {"test_threat.py::test_threat": "passed"}, run.output
    assert sorted(path.name for path in (tmp_path / "repo").iterdir()) == ["test_threat.py"]
    healthy()


def test_the_host_s_environment_is_not_visible(tmp_path, monkeypatch, healthy):
    monkeypatch.setenv("NASH_JAX_SECRET_TOKEN", "hunter2-do-not-leak")
    body = ("assert 'NASH_JAX_SECRET_TOKEN' not in os.environ\n"
            "assert not any('hunter2' in value for value in os.environ.values())\n"
            "for entry in os.listdir('/proc'):\n"
            "    try:\n"
            "        data = open(f'/proc/{entry}/environ', 'rb').read()\n"
            "    except OSError:\n"
            "        continue\n"
            "    assert b'hunter2' not in data, entry\n")
    run = run_tests(threat_repo(tmp_path / "repo", body), ["test_threat.py"], TIGHT)
    assert run.outcomes == {"test_threat.py::test_threat": "passed"}, run.output
    healthy()


@needs_namespaces
def test_a_socket_to_the_host_reaches_nothing(tmp_path, healthy):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        body = f"socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'leak')\n"
        run = run_tests(threat_repo(tmp_path / "repo", body), ["test_threat.py"], TIGHT)
        assert run.outcomes == {"test_threat.py::test_threat": "failed"}, run.output
        with pytest.raises(BlockingIOError):
            listener.accept()
    healthy()


def test_without_namespaces_a_run_still_works_and_says_what_it_lacked(tmp_path, monkeypatch):
    fallback = {**sandbox.protections(), **{name: False for name in sandbox.NAMESPACED}}
    monkeypatch.setattr(sandbox, "_probe", lambda: (fallback, "bwrap refused"))
    monkeypatch.setenv("NASH_JAX_SECRET_TOKEN", "hunter2")
    folder = threat_repo(tmp_path / "repo", "assert 'NASH_JAX_SECRET_TOKEN' not in os.environ\n"
                                            "assert os.environ['HOME'] != os.path.expanduser('~root')\n")
    run = run_tests(folder, ["test_threat.py"], dataclasses.replace(TIGHT, isolation="best_effort"))
    assert run.outcomes == {"test_threat.py::test_threat": "passed"}, run.output
    assert run.protections["network_namespace"] is False
    # every descriptor closed, so the output ends, and the process sleeps on: the wall still holds
    silent = run_tests(threat_repo(tmp_path / "loop", "os.closerange(0, 4096)\ntime.sleep(100)\n"),
                       ["test_threat.py"], SandboxLimits(wall_s=1.5, isolation="best_effort"))
    assert silent.limit_hit == "wall" and silent.seconds < 1.5 + 2, silent.summary()
