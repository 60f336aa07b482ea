"""The SSR sandbox: sandboxed pytest runs per second against plain `python -m pytest` subprocesses on
the same repository copy in the same run, and the cost split of validating one artifact (how many
pytest runs, seconds each, and the share of the validation spent inside them).

The peer runs the same command line (`python -m pytest -q -p no:cacheprovider --junitxml=...`) in a
fresh copy of the same tiny repository, in the host's environment with no namespaces or limits, and
with plugin autoloading off as in the sandbox (`peer_with_plugins_s`: the same with the venv's pytest
plugins loading, as a bare `python -m pytest` does); ratio is the sandbox's rate over the peer's (> 1
is faster). fraction_of_peak is null: nothing here is compute-bound.

    python tools/bench/ssr.py [--repeats 10]
"""

import argparse
import difflib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import emit
from nash_jax.sandbox import sandbox
from nash_jax.tasks.code import ssr_checks
from nash_jax.tasks.code.ssr_artifact import Artifact

# A tiny repository of two modules and their tests, and a bug in both that its weakening hides.
SOURCES = {
    "area.py": "def square(side):\n    return side * side\n\n\ndef rectangle(a, b):\n    return a * b\n",
    "words.py": "def initials(name):\n    return ''.join(part[0] for part in name.split())\n",
}
TEST_SOURCES = {
    "test_area.py": "from area import rectangle, square\n\n\ndef test_square():\n"
                    "    assert square(3) == 9\n\n\ndef test_rectangle():\n"
                    "    assert rectangle(2, 5) == 10\n",
    "test_words.py": "from words import initials\n\n\ndef test_initials():\n"
                     "    assert initials('Ada Lovelace') == 'AL'\n",
}
BUGS = {"area.py": ("side * side", "side + side"), "words.py": ("part[0]", "part[-1]")}
HIDDEN = {"test_area.py": ("    assert square(3) == 9\n", "    pass\n"),
          "test_words.py": ("    assert initials('Ada Lovelace') == 'AL'\n", "    pass\n")}
TESTS = list(TEST_SOURCES)


def make_repo(folder):
    folder.mkdir()
    for name, text in {**SOURCES, **TEST_SOURCES}.items():
        (folder / name).write_text(text)
    return folder


def _diff(files, changes):
    return "".join("".join(difflib.unified_diff(
        files[name].splitlines(keepends=True),
        files[name].replace(*change).splitlines(keepends=True), f"a/{name}", f"b/{name}"))
        for name, change in changes.items())


def two_file_artifact():
    return Artifact(bug_diff=_diff(SOURCES, BUGS), weaken_diff=_diff(TEST_SOURCES, HIDDEN),
                    test_files=tuple(TESTS), repository="bench")


def plain_run(repo, *, plugins=False):
    """The peer: a fresh copy and a plain pytest subprocess with its JUnit report."""
    env = dict(os.environ) if plugins else {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        shutil.copytree(repo, work)
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"--junitxml={tmp}/junit.xml", *TESTS], cwd=work, capture_output=True,
                       check=True, env=env)


def rate(fn, repeats):
    fn()  # warm the page cache and the namespace probe
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1 / statistics.median(times), statistics.median(times)


def namespace_setup_case(repeats):
    """What the namespaces cost a run: sandbox_init's view, then /bin/true as the uid, against
    /bin/true started plainly."""
    with tempfile.TemporaryDirectory() as tmp:
        box = Path(tmp)
        for name in ("work", "report", "tmp"):
            (box / name).mkdir()
        command = sandbox._namespace_command(box, 1 << 20, sandbox._sandbox_uid())
        ours, ours_s = rate(lambda: subprocess.run([*command, "/bin/true"], check=True), repeats)
        peer, peer_s = rate(lambda: subprocess.run(["/bin/true"], check=True), repeats)
    emit(case="namespace_setup", setup_s=round(ours_s - peer_s, 4), run_s=round(ours_s, 4),
         peer="/bin/true without namespaces", peer_time_s=round(peer_s, 4),
         ratio=round(ours / peer, 3), fraction_of_peak=None)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_repo(Path(tmp) / "repo")
        if sandbox.protections()["network_namespace"]:
            namespace_setup_case(args.repeats * 3)
        ours, ours_s = rate(lambda: sandbox.run_tests(repo, TESTS), args.repeats)
        peer, peer_s = rate(lambda: plain_run(repo), args.repeats)
        _, plugins_s = rate(lambda: plain_run(repo, plugins=True), max(2, args.repeats // 3))
        emit(case="sandboxed_pytest_run", runs_per_s=round(ours, 3), run_s=round(ours_s, 4),
             peer="plain python -m pytest subprocess", peer_time_s=round(peer_s, 4),
             ratio=round(ours / peer, 3), fraction_of_peak=None,
             peer_with_plugins_s=round(plugins_s, 4),
             protections=[name for name, on in sandbox.protections().items() if on is True])
        start = time.perf_counter()
        validation = ssr_checks.validate(two_file_artifact(), repo)
        total = time.perf_counter() - start
        in_runs = sum(run["seconds"] for run in validation.runs)
        emit(case="validate_one_artifact", valid=validation.valid, total_s=round(total, 3),
             pytest_runs=len(validation.runs), run_s=[run["seconds"] for run in validation.runs],
             share_in_sandbox=round(in_runs / total, 3), peer="plain pytest runs, same count",
             peer_time_s=round(peer_s * len(validation.runs), 3),
             ratio=round(peer_s * len(validation.runs) / total, 3), fraction_of_peak=None)


if __name__ == "__main__":
    main()
