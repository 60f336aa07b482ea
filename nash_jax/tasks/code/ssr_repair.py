"""The solver's side of an SSR artifact: what it is shown, and how its repair is graded.

The solver sees the repository with the bug and the weakening applied, and the reversed weakening
patch as its specification (no issue text). Its repair patch may change source files only; it is
applied to that repository, the oracle test files are reset to the original's, and the oracle tests
run in the sandbox: the reward is 1 when the run is valid and every oracle test passes, else 0 (the
paper's binary "all tests pass"; a repair that does not apply or hits a limit earns 0).
"""

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from nash_jax.sandbox.sandbox import SandboxLimits, run_tests
from nash_jax.tasks.code.ssr_patch import apply_patch, is_test_file, patched_files, reversed_diff


@dataclass(frozen=True)
class RepairGrade:
    reward: float
    detail: str
    run: object = None  # the TestRun of the oracle tests, None where the repair never ran


def build_solver_repo(artifact, repo_dir, folder):
    """Write the buggy, weakened repository into `folder` (new) and return the solver's
    specification: the reversed weakening patch."""
    shutil.copytree(repo_dir, folder, symlinks=True)
    apply_patch(artifact.bug_diff, folder, "bug_inject.diff")
    apply_patch(artifact.weaken_diff, folder, "test_weaken.diff")
    return reversed_diff(artifact.weaken_diff, "test_weaken.diff")


def grade_repair(artifact, repo_dir, repair_diff, limits=SandboxLimits()):
    """Reward 1 when `repair_diff` makes every oracle test pass on the buggy, weakened repository
    with the oracle files reset; 0 otherwise, with the reason."""
    try:
        touched = {path for patched in patched_files(repair_diff, "repair.diff")
                   for path in patched.paths()}
    except ValueError as err:
        return RepairGrade(0.0, str(err))
    tests = sorted(path for path in touched if is_test_file(path))
    if tests:
        return RepairGrade(0.0, f"the repair touches test file(s) {', '.join(tests)}; expected "
                                "source files only")
    with tempfile.TemporaryDirectory(prefix="nash-jax-repair-") as scratch:
        folder = Path(scratch) / "repo"
        build_solver_repo(artifact, repo_dir, folder)
        try:
            apply_patch(repair_diff, folder, "repair.diff")
        except ValueError as err:
            return RepairGrade(0.0, str(err))
        for name in artifact.test_files:
            shutil.copy2(Path(repo_dir) / name, folder / name)
        run = run_tests(folder, artifact.test_files, limits)
    if not run.valid:
        return RepairGrade(0.0, run.limit_hit and f"the {run.limit_hit} limit was hit" or run.problem,
                           run)
    failing = sorted(run.failing())
    if failing or not run.passed():
        return RepairGrade(0.0, f"failing: {', '.join(failing[:5]) or 'no test passed'}", run)
    return RepairGrade(1.0, f"all {len(run.passed())} oracle test(s) pass", run)
