"""The seven SSR checks on hand-made artifacts, each failing exactly one; the artifact text and
directory; diffs applied with git in a plain folder; the repair grader."""

import dataclasses

import pytest

from nash_jax.tasks.code import ssr_artifact, ssr_checks, ssr_patch, ssr_repair
from nash_jax.sandbox.sandbox import SandboxLimits
from tests.unit.tasks.code import ssr_repos as repos

LIMITS = SandboxLimits(wall_s=20, cpu_s=10)
SETTINGS = ssr_checks.CheckSettings(limits=LIMITS)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return repos.make_repo(tmp_path_factory.mktemp("ssr") / "repo")


def checked(validation):
    return [(check.name, check.passed) for check in validation.checks]


def test_a_valid_artifact_passes_all_seven_checks_in_five_runs(repo):
    validation = ssr_checks.validate(repos.valid_artifact(), repo, SETTINGS)
    assert validation.valid, validation.to_json()
    assert [name for name, passed in checked(validation) if passed] == list(ssr_checks.CHECKS)
    # original, bug, bug + weakening, and one run per restored bug file
    assert [run["label"] for run in validation.runs] == [
        "original", "bug", "bug+weakening", "bug without calc.py", "bug without text.py"]
    assert validation.to_json()["protections"]["rlimits"]


FAILING_ONE_CHECK = {
    # the weakening touches test_text.py, which is not an oracle file
    "oracle_files": (repos.artifact(repos.BREAK_ADD, repos.HIDE_ADD + repos.HIDE_SHOUT), {}),
    "patches_apply": (repos.artifact(repos.BREAK_ADD.replace("return a + b", "return a ** b"),
                                     repos.HIDE_ADD), {}),
    "collects": (repos.artifact(repos.BREAK_ADD, repos.HIDE_ADD,
                                ("test_calc.py", "test_nothing.py")), {}),
    "passes_on_original": (repos.artifact(repos.BREAK_ADD, repos.HIDE_ADD), {"min_passing": 3}),
    "changes_source_files": (repos.artifact(repos.BREAK_ADD, repos.HIDE_ADD),
                             {"min_changed_files": 2}),
    "bug_fails_tests": (repos.artifact(repos.HARMLESS_CALC), {}),
    "weakening_hides_failures": (repos.artifact(repos.BREAK_ADD, ""), {}),
    "each_file_matters": (repos.artifact(repos.BREAK_ADD + repos.HARMLESS_TEXT, repos.HIDE_ADD,
                                         ("test_calc.py", "test_text.py")), {}),
}


@pytest.mark.parametrize("failing", list(FAILING_ONE_CHECK))
def test_an_artifact_made_to_fail_one_check_fails_exactly_that_one(repo, failing):
    artifact, settings = FAILING_ONE_CHECK[failing]
    validation = ssr_checks.validate(artifact, repo, dataclasses.replace(SETTINGS, **settings))
    position = ssr_checks.CHECKS.index(failing)
    expected = [(name, True) for name in ssr_checks.CHECKS[:position]] + [(failing, False)]
    assert checked(validation) == expected, validation.to_json()
    assert validation.failure == failing and not validation.valid
    assert validation.limit_hit is None


def test_a_bug_that_also_edits_a_test_fails_the_source_files_check(repo):
    validation = ssr_checks.validate(repos.artifact(repos.BREAK_ADD + repos.HIDE_SHOUT, repos.HIDE_ADD),
                                     repo, SETTINGS)
    assert validation.failure == "changes_source_files"
    assert "touches test file(s) test_text.py" in validation.checks[-1].detail


def test_a_bug_that_does_not_apply_names_git_s_reason(repo):
    bad = repos.BREAK_ADD.replace("return a + b", "return a ** b")
    validation = ssr_checks.validate(repos.artifact(bad, repos.HIDE_ADD), repo, SETTINGS)
    assert validation.failure == "patches_apply"
    assert "bug_inject.diff does not apply" in validation.checks[-1].detail
    assert validation.runs == []  # no pytest run was spent on it


def test_a_run_that_hits_a_limit_makes_the_artifact_invalid(repo):
    looping = repos.diff("calc.py", repos.CALC, repos.CALC.replace(
        "    return a + b\n", "    while True:\n        pass\n"))
    limits = dataclasses.replace(LIMITS, wall_s=3, cpu_s=1)
    validation = ssr_checks.validate(repos.artifact(looping, repos.HIDE_ADD), repo,
                                     dataclasses.replace(SETTINGS, limits=limits))
    assert validation.failure == "bug_fails_tests"
    assert validation.limit_hit in ("cpu", "wall")
    assert "limit was hit" in validation.checks[-1].detail


def test_git_applies_the_diffs_in_a_plain_folder(tmp_path):
    folder = repos.make_repo(tmp_path / "plain")
    assert not any(parent.joinpath(".git").exists() for parent in [folder, *folder.parents])
    ssr_patch.apply_patch(repos.BREAK_ADD, folder, "bug_inject.diff")
    assert "return a - b" in (folder / "calc.py").read_text()
    with pytest.raises(ValueError, match="bug_inject.diff does not apply"):
        ssr_patch.apply_patch(repos.BREAK_ADD, folder, "bug_inject.diff")  # already applied
    reverse = ssr_patch.reversed_diff(repos.BREAK_ADD, "bug_inject.diff")
    ssr_patch.apply_patch(reverse, folder, "reversed")
    assert (folder / "calc.py").read_text() == repos.CALC


@pytest.mark.parametrize("bad, message", [
    ("--- a/../escape.py\n+++ b/../escape.py\n@@ -0,0 +1 @@\n+x\n", "leaves the repository"),
    ("--- /etc/passwd\n+++ /etc/passwd\n@@ -0,0 +1 @@\n+x\n", "lacks the 'a/' prefix"),
    ("--- a/x.py\n+++ b//abs.py\n@@ -0,0 +1 @@\n+x\n", "leaves the repository"),
    ("diff --git a/x b/y\nrename from ../x\nrename to y\n", "leaves the repository"),
    ("diff --git a/l b/l\nnew file mode 120000\n", "symbolic link"),
    ("--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n-a\n+b\n", "hunk ends early"),
    ("not a diff\n", "not part of a unified diff"),
])
def test_a_diff_that_leaves_the_repository_or_is_malformed_is_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        ssr_patch.patched_files(bad, "bug_inject.diff")


def test_policy_text_round_trips_and_bad_text_names_the_section():
    artifact = repos.valid_artifact()
    text = "I will break add.\n" + ssr_artifact.policy_text(artifact) + "done\n"
    assert ssr_artifact.parse_policy_text(text, "./repo") == artifact
    with pytest.raises(ValueError, match="0 <test_files> sections"):
        ssr_artifact.parse_policy_text(text.replace("<test_files>", "<tests>"), "./repo")
    with pytest.raises(ValueError, match="2 <bug_inject.diff> sections"):
        ssr_artifact.parse_policy_text(text + text, "./repo")
    with pytest.raises(ValueError, match="test_files line 2"):
        ssr_artifact.parse_policy_text(text.replace("test_text.py\n</", "/etc/test_x.py\n</"),
                                       "./repo")


def test_an_artifact_directory_round_trips(tmp_path):
    artifact = repos.valid_artifact()
    ssr_artifact.write_artifact_dir(tmp_path / "a", artifact, checks=[{"name": "x"}])
    assert ssr_artifact.read_artifact_dir(tmp_path / "a") == artifact
    assert (tmp_path / "a" / "checks.json").is_file()
    (tmp_path / "a" / "test_files.txt").unlink()
    with pytest.raises(ValueError, match="has no test_files.txt"):
        ssr_artifact.read_artifact_dir(tmp_path / "a")


def test_the_solver_sees_the_weakened_repository_and_the_reversed_weakening(repo, tmp_path):
    artifact = repos.valid_artifact()
    spec = ssr_repair.build_solver_repo(artifact, repo, tmp_path / "solver")
    assert "return a - b" in (tmp_path / "solver" / "calc.py").read_text()
    assert (tmp_path / "solver" / "test_calc.py").read_text() != repos.TEST_CALC
    ssr_patch.apply_patch(spec, tmp_path / "solver", "specification")
    assert (tmp_path / "solver" / "test_calc.py").read_text() == repos.TEST_CALC
    assert (tmp_path / "solver" / "test_text.py").read_text() == repos.TEST_TEXT


def test_a_repair_earns_one_only_when_every_reset_oracle_test_passes(repo):
    artifact = repos.artifact(repos.BREAK_ADD, repos.HIDE_ADD)
    fix = ssr_patch.reversed_diff(repos.BREAK_ADD, "bug_inject.diff")
    graded = ssr_repair.grade_repair(artifact, repo, fix, LIMITS)
    assert graded.reward == 1.0, graded.detail
    unfixed = ssr_repair.grade_repair(artifact, repo, repos.HARMLESS_TEXT, LIMITS)
    assert unfixed.reward == 0.0 and "test_calc.py::test_add" in unfixed.detail
    # a "repair" that edits the tests is refused before anything runs
    cheat = ssr_repair.grade_repair(artifact, repo, repos.HIDE_ADD, LIMITS)
    assert cheat.reward == 0.0 and cheat.run is None and "test file" in cheat.detail
    stale = ssr_repair.grade_repair(artifact, repo, repos.BREAK_ADD, LIMITS)
    assert stale.reward == 0.0 and "does not apply" in stale.detail
