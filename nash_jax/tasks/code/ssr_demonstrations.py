"""Demonstrations of the SSR artifact format, made by the mutation engine and checked by pytest.

A demonstration is what a good injector writes for one repository: a bug patch (one mutant of a
source file, tasks.code.mutations), a weakening patch that removes exactly the test functions the bug
makes fail (so the weakened suite passes on the buggy code), and the oracle test files (every test file
of the repository, reset before a repair is graded). Its repair (the reversed bug patch) is what a
good solver writes. Both warm-start the policy on the patch format before self-play.

A mutant is kept when its bug makes at least one previously passing test fail, no test file fails to
import, and the weakened suite passes: two pytest runs in a temporary copy, the outcome of each test
read from pytest's JUnit XML, never from what the code prints. Both run in the sandbox
(sandbox.sandbox), as every run of code that a mutation or a policy wrote does.

An artifact directory holds ARTIFACT_FILES (plus `repair.diff`, the solver's demonstration);
`Demonstration.text` is the same artifact in the policy's text form. Build some from the command line:

    python -m nash_jax.tasks.code.ssr_demonstrations OUT_DIR --n 8 --seed 0 [--split train] [--count]
"""

import argparse
import ast
import dataclasses
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from nash_jax.sandbox import sandbox
from nash_jax.tasks.code.mutations import Mutant, mutants, unified_diff
from nash_jax.sandbox.sandbox import SandboxLimits
from nash_jax.tasks.code.ssr_artifact import FILES, Artifact, policy_text, write_artifact_dir
from nash_jax.tasks.code import code_repositories

ARTIFACT_FILES = FILES
# The corpus's suites take about half a CPU second (pytest's start-up included); a mutant that makes
# a loop run forever is stopped at the CPU limit (the wall-clock one is for a run that sleeps) and
# dropped.
TEST_TIMEOUT_S = 30
LIMITS = SandboxLimits(wall_s=TEST_TIMEOUT_S, cpu_s=4, memory_bytes=2 * 1024**3)


@dataclass(frozen=True)
class Demonstration:
    repository: str  # a shipped name, or the path of a repository of the user's
    mutant: Mutant
    failing_tests: tuple  # pytest node ids ("test_x.py::test_f") the bug makes fail
    weaken_diff: str
    test_files: tuple  # the oracle test files, relative paths

    @property
    def bug_diff(self):
        return self.mutant.bug_diff

    @property
    def repair_diff(self):
        return self.mutant.repair_diff

    @property
    def artifact(self):
        return Artifact(self.bug_diff, self.weaken_diff, self.test_files, self.repository)

    def text(self):
        """The artifact in the policy's text form (ssr_artifact.policy_text)."""
        return policy_text(self.artifact)

    def write(self, directory):
        """The artifact directory (written whole or not at all), with `repair.diff` beside it."""
        write_artifact_dir(directory, self.artifact, extra={"repair.diff": self.repair_diff})


def run_tests(directory, timeout_s=TEST_TIMEOUT_S, isolation="required"):
    """{node id: "passed" | "failed" | "skipped"} of one sandboxed pytest run of every test file in
    `directory` (sandbox.sandbox; an error counts as a failure), and whether every test module was
    collected within the run's limits: a mutant that loops forever is no demonstration. Its CPU limit,
    not the wall clock, stops a loop, so which mutants are kept does not depend on how busy the
    machine is."""
    files = [f for f in code_repositories.repository_files(directory) if code_repositories.is_test_file(f)]
    run = sandbox.run_tests(directory, files,
                            dataclasses.replace(LIMITS, wall_s=timeout_s, isolation=isolation))
    # a collection error is reported under its file's own id, without "::"
    collected = run.valid and all("::" in test for test in run.outcomes)
    return {test: "failed" if outcome == "error" else outcome for test, outcome in run.outcomes.items()}, \
        collected


def weaken(test_text, names):
    """The test module without the test functions `names` ("test_f", "TestC.test_f"; a parametrised
    test goes whole): their lines and decorators go, with the blank lines after them; a class left
    with no test goes too."""
    tree = ast.parse(test_text)
    spans = []
    for node in tree.body:
        spans += _spans(node, "", names)
    lines = test_text.splitlines(keepends=True)
    for first, last in sorted(spans, reverse=True):
        # the gap left is the wider of the gaps around the definition (PEP 8's two blank lines
        # before a top-level function, one before a method), none at either end of the file
        while first > 0 and not lines[first - 1].strip():
            first -= 1
        while last < len(lines) and not lines[last].strip():
            last += 1
        gap = 0 if first == 0 or last == len(lines) else max(
            _blank_run(lines, first, 1), _blank_run(lines, last - 1, -1))
        lines[first:last] = ["\n"] * gap
    return "".join(lines)


def _blank_run(lines, start, step):
    """How many blank lines run from `start` (inclusive) in direction `step`."""
    count = 0
    while 0 <= start < len(lines) and not lines[start].strip():
        count, start = count + 1, start + step
    return count


def _spans(node, prefix, names):
    """0-based [first, last) line spans of the definitions under `node` named in `names`."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) - 1
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [(first, node.end_lineno)] if prefix + node.name in names else []
    if isinstance(node, ast.ClassDef):
        inner = [span for child in node.body for span in _spans(child, f"{prefix}{node.name}.", names)]
        tests = [c for c in node.body if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and c.name.startswith("test")]
        return [(first, node.end_lineno)] if tests and len(inner) == len(tests) else inner
    return []


def _by_file(node_ids):
    """{test file: {"test_f", "TestC.test_f"}} of pytest node ids (parameters dropped)."""
    out = {}
    for node in node_ids:
        path, *rest = node.split("::")
        out.setdefault(path, set()).add(".".join(rest).split("[")[0])
    return out


def demonstrate(repository, mutant, baseline, timeout_s=TEST_TIMEOUT_S, isolation="required"):
    """The Demonstration of one mutant of `repository`, or None when its bug is not one: no
    previously passing test fails, a test module no longer imports, or the weakened suite still
    fails. `baseline` is run_tests' outcomes on the original."""
    root = code_repositories.resolve(repository)
    with tempfile.TemporaryDirectory(prefix="nash-jax-mutant-") as scratch:
        copy = _copy(root, scratch)
        (copy / mutant.file).write_text(mutant.mutated, encoding="utf-8")
        outcomes, collected = run_tests(copy, timeout_s, isolation)
        failing = sorted(n for n, o in outcomes.items() if o == "failed" and baseline.get(n) == "passed")
        if not collected or not failing:
            return None
        diffs = []
        for path, names in sorted(_by_file(failing).items()):
            before = (copy / path).read_text(encoding="utf-8")
            after = weaken(before, names)
            (copy / path).write_text(after, encoding="utf-8")
            diffs.append(unified_diff(path, before, after))
        weakened, collected = run_tests(copy, timeout_s, isolation)
        if not collected or not weakened or any(o == "failed" for o in weakened.values()):
            return None
    tests = tuple(f for f in code_repositories.repository_files(root) if code_repositories.is_test_file(f))
    return Demonstration(str(repository), mutant, tuple(failing), "".join(diffs), tests)


def _copy(root, scratch):
    """A copy of the repository to run in: never its own directory, where a pytest configuration
    of a directory above it would apply and the run could write."""
    copy = Path(scratch) / "repository"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns(*code_repositories.SKIPPED_DIRS))
    return copy


def repository_demonstrations(repository, seed, timeout_s=TEST_TIMEOUT_S, isolation="required"):
    """The demonstrations of a repository's mutants, lazily, in the mutants' order for `seed`
    (`isolation`: the sandbox's, SandboxLimits.isolation)."""
    with tempfile.TemporaryDirectory(prefix="nash-jax-original-") as scratch:
        baseline, collected = run_tests(_copy(code_repositories.resolve(repository), scratch), timeout_s,
                                        isolation)
    if not collected or not any(o == "passed" for o in baseline.values()):
        raise ValueError(f"repository {repository}: its tests do not pass on the original ("
                         f"{sum(o == 'passed' for o in baseline.values())} passed, collected: "
                         f"{collected}); expected a repository whose tests pass before any bug")
    for mutant in mutants(repository, seed):
        demo = demonstrate(repository, mutant, baseline, timeout_s, isolation)
        if demo is not None:
            yield demo


def build_demonstrations(n, seed, split="train", repositories=None, timeout_s=TEST_TIMEOUT_S):
    """n demonstrations dealt out over the repositories (the shipped ones of `split`, or the
    entries `repositories`, as code_repositories.expand reads them) one repository at a time, so
    that they spread over all of them; the same seed gives the same list. Fewer when the
    repositories run out of valid mutants."""
    entries = code_repositories.names(split) if repositories is None else [
        str(p) for p in code_repositories.expand(repositories)]
    return deal([repository_demonstrations(entry, seed, timeout_s) for entry in entries], n)


def deal(streams, n):
    """Up to n items taken from the iterators `streams` one at a time in turn (a spent one drops out)."""
    streams, out = list(streams), []
    while streams and len(out) < n:
        for stream in list(streams):
            demo = next(stream, None)
            if demo is None:
                streams.remove(stream)
                continue
            out.append(demo)
            if len(out) == n:
                break
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="a new directory: one artifact directory per demonstration")
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", default="train", choices=code_repositories.SPLIT_NAMES)
    parser.add_argument("--count", action="store_true",
                        help="instead: print each repository's mutants and valid mutants (JSON lines)")
    args = parser.parse_args(argv)
    if args.count:
        for name in code_repositories.names(args.split):
            valid = sum(1 for _ in repository_demonstrations(name, args.seed))
            print(json.dumps({"repository": name, "mutants": len(mutants(name, args.seed)),
                              "valid": valid}), flush=True)
        return
    for i, demo in enumerate(build_demonstrations(args.n, args.seed, args.split)):
        directory = args.out / f"{i:03d}_{Path(demo.repository).name}"
        demo.write(directory)
        print(f"{directory}: {demo.mutant.description}; {len(demo.failing_tests)} test(s) weakened")


if __name__ == "__main__":
    main()
