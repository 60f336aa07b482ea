"""The shipped code repositories (SSR's corpus) and the loader that reads them or a user's own."""

import ast
import fnmatch
import shutil
import tomllib
from pathlib import Path

import pytest

from nash_jax.tasks.code.ssr_demonstrations import run_tests
from nash_jax.tasks.code import code_repositories as repos

ROOT = Path(__file__).resolve().parents[4]


def _user_repository(path, source="def double(x):\n    return 2 * x\n",
                     test="from calc import double\n\n\ndef test_double():\n    assert double(3) == 6\n"):
    path.mkdir(parents=True)
    (path / "calc.py").write_text(source)
    (path / "test_calc.py").write_text(test)
    return path


def test_every_shipped_test_passes_on_the_original(tmp_path):
    copy = tmp_path / "code_repos"
    shutil.copytree(repos.SHIPPED, copy)
    outcomes, collected = run_tests(copy)
    assert collected
    failed = [node for node, outcome in outcomes.items() if outcome != "passed"]
    assert not failed, failed
    per_repository = {name: sum(node.startswith(f"{name}/") for node in outcomes) for name in repos.names()}
    assert all(6 <= count <= 12 for count in per_repository.values()), per_repository


def test_splits_name_every_shipped_directory_and_hold_enough_repositories():
    on_disk = {p.name for p in repos.SHIPPED.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert on_disk == set(repos.SPLITS)
    assert len(repos.names("train")) >= 16 and len(repos.names("heldout")) >= 4
    assert not set(repos.names("train")) & set(repos.names("heldout"))
    assert repos.names() == sorted(repos.names("train") + repos.names("heldout"))


def test_each_shipped_repository_is_one_module_and_its_plain_tests():
    modules = []
    for name in repos.names():
        files = repos.check_repository(repos.resolve(name))
        sources = [f for f in files if repos.is_source_file(f)]
        assert files == sorted(sources + [f"test_{sources[0]}"]) and len(sources) == 1, (name, files)
        modules.append(sources[0])
        test_tree = ast.parse((repos.SHIPPED / name / f"test_{sources[0]}").read_text())
        assert not [n for n in ast.walk(test_tree) if isinstance(n, ast.Import | ast.ImportFrom)
                    and (n.module if isinstance(n, ast.ImportFrom) else n.names[0].name)
                    not in ("pytest", sources[0][:-3])], f"{name}: tests import only pytest and the module"
    assert len(set(modules)) == len(modules)  # one pytest run over the whole corpus imports each once


def test_pyproject_ships_every_repository_file():
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["nash_jax.tasks"]
    for name in repos.names():
        for f in repos.repository_files(repos.SHIPPED / name):
            relative = f"{repos.SHIPPED.relative_to(ROOT / 'nash_jax' / 'tasks').as_posix()}/{name}/{f}"
            assert any(fnmatch.fnmatch(relative, pattern) for pattern in package_data), relative


def test_resolve_a_shipped_name_and_a_user_directory(tmp_path):
    assert repos.resolve("roman") == repos.SHIPPED / "roman"
    mine = _user_repository(tmp_path / "mine")
    assert repos.resolve(str(mine)) == mine.resolve()
    assert repos.resolve(mine) == mine.resolve()


def test_resolve_refuses_an_unknown_name_listing_the_shipped_ones():
    with pytest.raises(ValueError, match=r"'romans': neither a shipped repository \(anagrams, .*roman, "
                                         r".*nor an existing directory; expected .*test_\*\.py"):
        repos.resolve("romans")


@pytest.mark.parametrize("case, message", [
    ("no_tests", r"no pytest file \(test_\*\.py or \*_test\.py\) in it"),
    ("no_source", r"no Python source file"),
    ("too_big", r"data\.bin is 262145 bytes, over the cap of 262144"),
    ("not_a_directory", r"neither a shipped repository .* nor an existing directory"),
])
def test_resolve_says_which_directory_and_what_it_lacks(tmp_path, case, message):
    path = tmp_path / case
    if case == "no_tests":
        _user_repository(path)
        (path / "test_calc.py").rename(path / "check_calc.py")
    elif case == "no_source":
        _user_repository(path)
        (path / "calc.py").unlink()
    elif case == "too_big":
        _user_repository(path)
        (path / "data.bin").write_bytes(b"x" * (repos.MAX_FILE_BYTES + 1))
    else:
        path.write_text("a file")
    with pytest.raises(ValueError, match=message) as err:
        repos.resolve(str(path))
    assert str(path) in str(err.value)


def test_skipped_directories_do_not_count(tmp_path):
    mine = _user_repository(tmp_path / "mine")
    (mine / ".git").mkdir()
    (mine / ".git" / "pack").write_bytes(b"x" * (repos.MAX_FILE_BYTES + 1))
    assert repos.check_repository(mine) == ["calc.py", "test_calc.py"]


def test_dataset_of_a_split_has_the_columns_and_texts():
    table = repos.as_dataset(split="heldout")
    assert table.column_names == ["name", "split", "path", "source_files", "test_files", "source_texts",
                                  "test_texts"]
    assert table["name"] == repos.names("heldout") and set(table["split"]) == {"heldout"}
    row = table[table["name"].index("bowling")]
    assert row["source_files"] == ["bowling.py"] and row["test_files"] == ["test_bowling.py"]
    assert row["source_texts"] == [(repos.SHIPPED / "bowling" / "bowling.py").read_text()]
    assert "def test_perfect_game" in row["test_texts"][0]


def test_dataset_of_paths_expands_patterns_and_marks_user_rows(tmp_path):
    _user_repository(tmp_path / "many" / "b")
    _user_repository(tmp_path / "many" / "a", test="from calc import double\n\n\ndef test_zero():\n"
                                                  "    assert double(0) == 0\n")
    _user_repository(tmp_path / "single" / "nested")
    (tmp_path / "many" / "notes.txt").write_text("a file the pattern matches is not a repository")
    table = repos.as_dataset(paths=[str(tmp_path / "many" / "*"), tmp_path / "single" / "nested", "grades"])
    assert table["name"] == ["a", "b", "nested", "grades"]
    assert table["split"] == ["user", "user", "user", "heldout"]
    assert "test_zero" in table["test_texts"][0][0]


def test_dataset_refuses_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="not both"):
        repos.as_dataset(split="train", paths=["roman"])
    with pytest.raises(ValueError, match="split 'test': expected one of train, heldout"):
        repos.names("test")
    with pytest.raises(ValueError, match="the pattern matches no directory"):
        repos.as_dataset(paths=[str(tmp_path / "nothing" / "*")])
