"""`nash-jax ssr-validate`: exit 0 for a valid artifact, 1 naming the failed check, 2 for one that
cannot be read; --json; the repository line as a path (relative to the artifact) or a name."""

import json
import subprocess
from pathlib import Path

import pytest

from nash_jax import cli
from nash_jax.tasks.code.ssr_artifact import write_artifact_dir
from tests.processes import USER_CLI
from tests.unit.tasks.code import ssr_repos as repos


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    root = tmp_path_factory.mktemp("artifacts")
    repos.make_repo(root / "repo")
    write_artifact_dir(root / "valid", repos.artifact(repos.BREAK_ADD, repos.HIDE_ADD,
                                                      repository="../repo"))
    write_artifact_dir(root / "unhidden", repos.artifact(repos.BREAK_ADD, "",
                                                         repository=str(root / "repo")))
    return root


def test_a_valid_artifact_exits_0_and_prints_every_check_and_the_protections(artifacts):
    done = subprocess.run([*USER_CLI, "ssr-validate", str(artifacts / "valid")], capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[4])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "valid: all seven checks pass"
    assert sum(line.strip().startswith("pass ") for line in lines) == 8
    assert lines[1].startswith("sandbox: ") and "rlimits cpu, address_space" in lines[1]


def test_a_failing_check_exits_1_and_is_named_in_json(artifacts, capsys):
    assert cli.main(["ssr-validate", str(artifacts / "unhidden"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False and report["failure"] == "weakening_hides_failures"
    assert [check["passed"] for check in report["checks"]] == [True] * 6 + [False]
    assert [run["label"] for run in report["runs"]] == ["original", "bug", "bug+weakening"]
    assert report["protections"]["scrubbed_environment"] is True


@pytest.mark.parametrize("damage, message", [
    (lambda folder: (folder / "bug_inject.diff").unlink(), "has no bug_inject.diff"),
    (lambda folder: (folder / "repository").write_text("no_such_repository\n"), "no_such_repository"),
    (lambda folder: (folder / "repository").write_text("./missing\n"), "is not a directory"),
    (lambda folder: (folder / "test_weaken.diff").write_text("--- a/../x\n+++ b/../x\n"),
     "leaves the repository"),
])
def test_an_artifact_that_cannot_be_read_exits_2_saying_why(artifacts, tmp_path, capsys, damage,
                                                            message):
    folder = tmp_path / "artifact"
    write_artifact_dir(folder, repos.artifact(repos.BREAK_ADD, repository=str(artifacts / "repo")))
    damage(folder)
    assert cli.main(["ssr-validate", str(folder)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("nash-jax ssr-validate: error:") and message in error, error


@pytest.fixture
def namespaces_refused(monkeypatch):
    from nash_jax.sandbox import bwrap, sandbox
    monkeypatch.setattr(bwrap, "probe", lambda: "bwrap failed (setting up uid map: Permission denied)")
    sandbox._probe.cache_clear()
    yield
    sandbox._probe.cache_clear()


def test_required_isolation_stops_in_one_line_and_best_effort_names_what_is_off(
        artifacts, namespaces_refused, capsys):
    assert cli.main(["ssr-validate", str(artifacts / "valid")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Permission denied" in err, err
    assert "user namespaces" in err and "--isolation best_effort" in err, err
    assert cli.main(["ssr-validate", str(artifacts / "valid"), "--isolation", "best_effort"]) == 0
    captured = capsys.readouterr()
    assert "isolation=best_effort" in captured.err and "network_namespace" in captured.err
    assert "not available: user_namespace, pid_namespace, network_namespace" in captured.out
