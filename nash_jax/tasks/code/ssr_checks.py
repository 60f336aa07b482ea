"""The seven consistency checks of an SSR artifact (Wei et al., 2025; notes_self_play.md §1.3), run in
the sandbox, and the grader of a solver's repair.

In order, stopping at the first that fails (metrics count artifacts by it):
  1 oracle_files             the oracle test files exist, are test files, and cover every file the
                             weakening touches (which it modifies, never creates or deletes)
    patches_apply            both diffs apply (`git apply --check`), the weakening on top of the bug
  2 collects                 pytest collects and reports every oracle file on the original
  3 passes_on_original       at least `min_passing` oracle tests pass on the original
  4 changes_source_files     the bug touches no test file and at least `min_changed_files` others
  5 bug_fails_tests          at least `min_failing` tests that passed on the original fail with the bug
  6 weakening_hides_failures with bug and weakening, every remaining oracle test passes
  7 each_file_matters        restoring any one bug file alone fixes at least one of those failures

Runs: the original, the bug, bug + weakening, and one per bug file when the bug changes several (with
one file, restoring it is the original, whose run is reused). A run that hits a sandbox limit or leaves
no readable report fails the check that needed it.
"""

import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nash_jax.sandbox.sandbox import SandboxLimits, protections, run_tests
from nash_jax.tasks.code.ssr_patch import apply_patch, is_test_file, patched_files

CHECKS = ("oracle_files", "patches_apply", "collects", "passes_on_original", "changes_source_files",
          "bug_fails_tests", "weakening_hides_failures", "each_file_matters")


@dataclass(frozen=True)
class CheckSettings:
    min_passing: int = 1
    min_changed_files: int = 1
    min_failing: int = 1
    limits: SandboxLimits = SandboxLimits()

    def __post_init__(self):
        for name in ("min_passing", "min_changed_files", "min_failing"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"CheckSettings.{name}={getattr(self, name)!r}; expected an integer "
                                 ">= 1")


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    detail: str


@dataclass
class Validation:
    """The checks that ran (the last one failed unless all passed), each pytest run's summary, the
    sandbox's protections, and the first failure's name (None for a valid artifact)."""
    checks: list = field(default_factory=list)
    runs: list = field(default_factory=list)
    protections: dict = field(default_factory=protections)
    failure: str | None = None
    limit_hit: str | None = None

    @property
    def valid(self):
        return self.failure is None and len(self.checks) == len(CHECKS)

    def to_json(self):
        return {"valid": self.valid, "failure": self.failure, "limit_hit": self.limit_hit,
                "checks": [asdict(check) for check in self.checks], "runs": self.runs,
                "protections": self.protections}


def validate(artifact, repo_dir, settings=CheckSettings()):
    """Run the checks on `artifact` against the repository at `repo_dir`; returns a Validation."""
    with tempfile.TemporaryDirectory(prefix="nash-jax-ssr-") as scratch:
        work = _Work(artifact, Path(repo_dir), Path(scratch), settings, Validation())
        for name in CHECKS:
            passed, detail = _STEPS[name](work)
            work.validation.checks.append(CheckResult(name, passed, detail))
            if not passed:
                work.validation.failure = name
                break
        return work.validation


@dataclass
class _Work:
    artifact: object
    repo: Path
    scratch: Path
    settings: CheckSettings
    validation: Validation
    runs: dict = field(default_factory=dict)

    def run(self, label, folder):
        result = run_tests(folder, self.artifact.test_files, self.settings.limits)
        self.validation.runs.append({"label": label, **result.summary()})
        self.runs[label] = result
        if not result.valid:
            self.validation.limit_hit = self.validation.limit_hit or result.limit_hit
        return result

    def variant(self, name, source=None):
        folder = self.scratch / name
        shutil.copytree(source or self.repo, folder, symlinks=True)
        return folder


def _unusable(run):
    """Why a run cannot answer a check, or None."""
    if run.limit_hit:
        return f"the {run.limit_hit} limit was hit (run invalid)"
    return run.problem


def _oracle_files(work):
    names = work.artifact.test_files
    if not names:
        return False, "test_files lists no file"
    if len(set(names)) != len(names):
        return False, "test_files lists a file twice"
    for name in names:
        if not is_test_file(name):
            return False, f"{name} is not a test file (test_*.py, *_test.py or conftest.py)"
        if not (work.repo / name).is_file():
            return False, f"{name} is not a file of the repository"
    for patched in patched_files(work.artifact.weaken_diff, "test_weaken.diff"):
        if patched.old != patched.new:
            return False, (f"the weakening creates, deletes or renames {patched.old or patched.new}; "
                           "expected changes to oracle test files")
        if patched.new not in names:
            return False, f"the weakening touches {patched.new}, which test_files does not list"
    return True, f"{len(names)} oracle file(s): {', '.join(names)}"


def _patches_apply(work):
    buggy = work.variant("buggy")
    try:
        apply_patch(work.artifact.bug_diff, buggy, "bug_inject.diff")
        weakened = work.variant("weakened", buggy)
        apply_patch(work.artifact.weaken_diff, weakened, "test_weaken.diff")
    except ValueError as err:
        return False, str(err)
    return True, "bug_inject.diff and test_weaken.diff apply"


def _collects(work):
    run = work.run("original", work.repo)
    if _unusable(run):
        return False, _unusable(run)
    for name in work.artifact.test_files:
        if run.outcomes.get(name) == "error":
            return False, f"{name} does not collect on the original"
        if not any(test.startswith(name + "::") for test in run.outcomes):
            return False, f"pytest reports no test of {name}"
    return True, f"{len(run.outcomes)} test(s) reported"


def _passes_on_original(work):
    passed = len(work.runs["original"].passed())
    needed = work.settings.min_passing
    return passed >= needed, f"{passed} pass on the original (at least {needed} needed)"


def _changes_source_files(work):
    touched = {path for patched in patched_files(work.artifact.bug_diff, "bug_inject.diff")
               for path in patched.paths()}
    tests = sorted(path for path in touched if is_test_file(path))
    if tests:
        return False, f"the bug touches test file(s) {', '.join(tests)}; expected source files only"
    needed = work.settings.min_changed_files
    return len(touched) >= needed, (f"{len(touched)} source file(s) changed: "
                                    f"{', '.join(sorted(touched)) or 'none'} (at least {needed})")


def _bug_fails_tests(work):
    run = work.run("bug", work.scratch / "buggy")
    if _unusable(run):
        return False, _unusable(run)
    broken = _broken(work.runs["original"], run)
    needed = work.settings.min_failing
    return len(broken) >= needed, (f"{len(broken)} test(s) that passed now fail: "
                                   f"{', '.join(sorted(broken)[:5])} (at least {needed})")


def _weakening_hides_failures(work):
    run = work.run("bug+weakening", work.scratch / "weakened")
    if _unusable(run):
        return False, _unusable(run)
    failing = sorted(run.failing())
    if failing:
        return False, f"still failing after the weakening: {', '.join(failing[:5])}"
    if not run.passed():
        return False, "no oracle test passes after the weakening"
    return True, f"{len(run.passed())} pass with bug and weakening"


def _each_file_matters(work):
    broken = _broken(work.runs["original"], work.runs["bug"])
    bug_files = patched_files(work.artifact.bug_diff, "bug_inject.diff")
    if len(bug_files) == 1:
        return True, "one bug file: restoring it gives the original, where every failure passes"
    for number, patched in enumerate(bug_files):
        folder = work.variant(f"restored_{number}", work.scratch / "buggy")
        _restore(work.repo, folder, patched)
        run = work.run(f"bug without {patched.old or patched.new}", folder)
        if _unusable(run):
            return False, _unusable(run)
        if not broken & run.passed():
            return False, f"restoring {patched.old or patched.new} alone fixes no failing test"
    return True, f"restoring each of {len(bug_files)} files alone fixes a failing test"


def _broken(original, bug):
    """Tests that passed on the original and fail with the bug (also those of a file that no longer
    collects)."""
    return {test for test in original.passed()
            if bug.outcomes.get(test) in ("failed", "error")
            or test not in bug.outcomes and bug.outcomes.get(test.split("::")[0]) == "error"}


def _restore(repo, folder, patched):
    """Undo one file's change: its new path removed, its old path copied back from the repository."""
    if patched.new is not None:
        (folder / patched.new).unlink(missing_ok=True)
    if patched.old is not None:
        (folder / patched.old).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / patched.old, folder / patched.old)


_STEPS = {"oracle_files": _oracle_files, "patches_apply": _patches_apply, "collects": _collects,
          "passes_on_original": _passes_on_original, "changes_source_files": _changes_source_files,
          "bug_fails_tests": _bug_fails_tests, "weakening_hides_failures": _weakening_hides_failures,
          "each_file_matters": _each_file_matters}
