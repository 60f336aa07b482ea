"""The mutation engine (one-token bugs, patches git applies) and the SSR demonstrations made from it."""

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

from nash_jax.tasks.code import mutations, ssr_demonstrations as demos
from nash_jax.tasks.code.ssr_artifact import read_artifact_dir, resolve_repository
from nash_jax.tasks.code.ssr_checks import CHECKS, validate
from nash_jax.tasks.code import code_repositories as repos

SOURCE = '''"""A docstring with 1 < 2 in it."""


def f(a, b, items):
    if a < b and not items:
        return True
    total = a + 3
    total -= b
    return items[1:a] == [total] or a in items  # café
'''


def _changed_lines(diff):
    return [line for line in diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def _git_apply(directory, diff, *flags):
    return subprocess.run(["git", "apply", "--unidiff-zero", *flags, "-"], input=diff, text=True, cwd=directory,
                          capture_output=True)


def test_each_operator_edits_one_place_and_keeps_the_rest_of_the_file():
    found = {m.description.split(": ", 1)[1] for m in mutations.file_mutants("m.py", SOURCE)}
    for expected in ["`<` -> `<=` (comparison)", "`and` -> `or` (boolean)", "`not` removed (negation)",
                     "`True` -> `False` (return)", "`+` -> `-` (arithmetic)", "`-=` -> `+=` (arithmetic)",
                     "`3` -> `4` (constant)", "`3` -> `2` (constant)", "`a` -> `a + 1` (bound)",
                     "`in` -> `not in` (comparison)", "`==` -> `!=` (comparison)", "`or` -> `and` (boolean)"]:
        assert expected in found, (expected, sorted(found))
    for mutant in mutations.file_mutants("m.py", SOURCE):
        changed = _changed_lines(mutant.bug_diff)
        assert len(changed) == 2 and changed[0][1:].replace(" ", "") != changed[1][1:].replace(" ", ""), \
            mutant.description
        assert '"""A docstring with 1 < 2 in it."""' in mutant.mutated  # docstrings are not code
        assert ast.dump(ast.parse(mutant.mutated)) != ast.dump(ast.parse(SOURCE))


def test_columns_count_characters_after_non_ascii_text():
    text = 'x = "é" < y\n'
    (mutant,) = [m for m in mutations.file_mutants("m.py", text) if m.operator == "comparison"]
    assert mutant.mutated == 'x = "é" <= y\n'


def test_unknown_operator_is_refused():
    with pytest.raises(ValueError, match=r"\['swap'\]: unknown; expected some of comparison"):
        mutations.file_mutants("m.py", SOURCE, operators=("comparison", "swap"))


def test_mutants_apply_with_git_and_their_repairs_restore_the_original(tmp_path):
    for name in repos.names():
        root = repos.resolve(name)
        for mutant in mutations.mutants(name, seed=0)[:4]:
            copy = tmp_path / f"{name}_{mutant.line}_{mutant.operator}"
            shutil.copytree(root, copy)
            checked = _git_apply(copy, mutant.bug_diff, "--check")
            assert checked.returncode == 0, (mutant.description, checked.stderr)
            assert _git_apply(copy, mutant.bug_diff).returncode == 0
            assert (copy / mutant.file).read_text() == mutant.mutated
            assert _git_apply(copy, mutant.repair_diff).returncode == 0
            assert (copy / mutant.file).read_text() == mutant.original


def test_a_last_line_without_newline_gets_git_marker(tmp_path):
    (tmp_path / "m.py").write_text("x = 1 < 2")
    (mutant, *_) = mutations.file_mutants("m.py", "x = 1 < 2", operators=("comparison",))
    assert "\\ No newline at end of file" in mutant.bug_diff
    assert _git_apply(tmp_path, mutant.bug_diff).returncode == 0
    assert (tmp_path / "m.py").read_text() == "x = 1 <= 2"


def test_mutant_order_is_drawn_by_the_seed():
    first, again, other = (mutations.mutants("roman", seed) for seed in (0, 0, 1))
    assert first == again and first != other
    assert sorted(m.description for m in first) == sorted(m.description for m in other)
    kinds = {m.operator for m in first[:5]}
    assert len(kinds) == 5  # the first few are of different kinds


def test_weaken_removes_exactly_the_named_tests():
    text = ('import pytest\n\n\ndef test_a():\n    pass\n\n\n@pytest.mark.parametrize("x", [1])\n'
            'def test_b(x):\n    pass\n\n\nclass TestC:\n    def test_c(self):\n        pass\n\n\n'
            'def test_d():\n    pass\n')
    weakened = demos.weaken(text, {"test_b", "TestC.test_c", "test_d"})
    assert weakened == "import pytest\n\n\ndef test_a():\n    pass\n"
    assert demos.weaken(text, {"test_a"}).startswith("import pytest\n\n\n@pytest.mark.parametrize")
    last_method = demos.weaken(text.replace("class TestC:\n", "class TestC:\n    def test_e(self):\n"
                                            "        pass\n\n"), {"TestC.test_c"})
    assert "class TestC:\n    def test_e(self):\n        pass\n\n\ndef test_d" in last_method


@pytest.fixture(scope="module")
def built():
    return demos.build_demonstrations(2, seed=0, repositories=["stack", "rle"])


def test_demonstrations_are_valid_artifacts(built, tmp_path):
    assert [d.repository for d in built] == [str(repos.resolve(n)) for n in ("stack", "rle")]
    for demo in built:
        name = Path(demo.repository).name
        copy = tmp_path / name
        shutil.copytree(demo.repository, copy)
        assert _git_apply(copy, demo.bug_diff, "--check").returncode == 0
        _git_apply(copy, demo.bug_diff)
        outcomes, _ = demos.run_tests(copy)
        assert {n for n, o in outcomes.items() if o == "failed"} == set(demo.failing_tests)
        assert _git_apply(copy, demo.weaken_diff).returncode == 0
        weakened, _ = demos.run_tests(copy)
        assert set(weakened) == set(outcomes) - set(demo.failing_tests)  # exactly those removed
        assert set(weakened.values()) == {"passed"}
        assert _git_apply(copy, demo.repair_diff).returncode == 0
        shutil.copy(Path(demo.repository) / f"test_{name}.py", copy)  # the oracle tests reset
        repaired, _ = demos.run_tests(copy)
        assert set(repaired) == set(outcomes) and set(repaired.values()) == {"passed"}
        assert demo.test_files == (f"test_{name}.py",)


def test_demonstrations_pass_the_seven_checks_in_the_sandbox(built, tmp_path):
    """What warm-starts the injector is what the recipe will accept: each demonstration, read back
    from its artifact directory, passes every SSR check (ssr_checks, sandboxed)."""
    for k, demo in enumerate(built):
        demo.write(tmp_path / str(k))
        artifact = read_artifact_dir(tmp_path / str(k))
        validation = validate(artifact, resolve_repository(artifact.repository, tmp_path / str(k)))
        assert validation.failure is None and len(validation.checks) == len(CHECKS), validation


def test_demonstrations_are_drawn_by_the_seed(built):
    for demo in built:
        name = Path(demo.repository).name
        first_valid = next(demos.repository_demonstrations(name, seed=0))
        assert first_valid.mutant == demo.mutant and first_valid.weaken_diff == demo.weaken_diff


def test_artifact_directory_and_text_form(built, tmp_path):
    demo = built[0]
    demo.write(tmp_path / "artifact")
    files = {p.name: p.read_text() for p in (tmp_path / "artifact").iterdir() if p.name != ".nash-jax"}
    assert set(files) == set(demos.ARTIFACT_FILES) | {"repair.diff"}
    assert files["bug_inject.diff"] == demo.bug_diff and files["test_weaken.diff"] == demo.weaken_diff
    assert files["test_files.txt"] == "".join(f + "\n" for f in demo.test_files)
    assert files["repository"] == demo.repository + "\n"
    text = demo.text()
    assert text == (f"<bug_inject.diff>\n{demo.bug_diff}</bug_inject.diff>\n"
                    f"<test_weaken.diff>\n{demo.weaken_diff}</test_weaken.diff>\n"
                    f"<test_files>\n{demo.test_files[0]}\n</test_files>\n")


def test_a_user_repository_with_tests_in_a_folder_and_a_class(tmp_path):
    repo = tmp_path / "mine"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text("def clamp(x, lo, hi):\n    if x < lo:\n        return lo\n"
                                  "    return x if x <= hi else hi\n")
    (repo / "tests" / "conftest.py").write_text(
        "import os, sys\nsys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))\n")
    (repo / "tests" / "test_calc.py").write_text(
        "from calc import clamp\n\n\nclass TestClamp:\n    def test_inside(self):\n"
        "        assert clamp(5, 0, 10) == 5\n\n    def test_low(self):\n        assert clamp(-5, 0, 10) == 0\n"
        "\n\ndef test_high():\n    assert clamp(50, 0, 10) == 10\n")
    (demo,) = demos.build_demonstrations(1, seed=0, repositories=[str(tmp_path / "*")])
    assert demo.test_files == ("tests/test_calc.py",)
    assert demo.failing_tests == ("tests/test_calc.py::TestClamp::test_low",)
    assert "-    def test_low(self):" in demo.weaken_diff and "+++ b/tests/test_calc.py" in demo.weaken_diff
