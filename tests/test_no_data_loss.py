"""Issue 27's findings, each a test: nash_jax never deletes or overwrites what it did not create (run
directories, --out targets), refuses commands that do not apply to a run, validates model configs and
the paths a run needs before touching its directory, and logs each step's metrics once."""

from pathlib import Path

import pytest

from nash_jax import runs
from nash_jax.runs import RunDir


def user_folder(root):
    """A folder of the user's with other programs' temporaries at several depths."""
    for relative in (".a.tmp", "sub/.b.tmp", "sub/deeper/.c.tmp/inner.txt", "notes.txt"):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text("mine")
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_users_folder_is_refused_as_run_directory_and_its_temporaries_survive(tmp_path):
    before = user_folder(tmp_path / "home")
    with pytest.raises(ValueError, match=r"run directory .*home holds files \(.a.tmp, notes.txt, sub\) "
                                         r"but no manifest.json, so nash_jax did not make it"):
        RunDir(tmp_path / "home").acquire()
    assert sorted(str(p.relative_to(tmp_path / "home")) for p in (tmp_path / "home").rglob("*")) == before


def test_a_new_run_directory_gets_its_manifest_at_once_and_is_accepted_again(tmp_path):
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "new", tmp_path / "empty"):
        run = RunDir(path)
        run.acquire()
        run.close()
        assert (path / "manifest.json").is_file()
        RunDir(path).acquire()  # nash_jax's now: resumed, not refused


def test_the_sweep_removes_only_nash_jax_temporaries_and_never_follows_links_out(tmp_path):
    RunDir(tmp_path / "run").finish("init", [])
    outside = tmp_path / "outside"
    (outside / ".w.nash-jax-abc.tmp").mkdir(parents=True)  # named like ours, but outside the run
    (outside / ".w.nash-jax-abc.tmp" / "keep.txt").write_text("x")
    (tmp_path / "run" / "linked").symlink_to(outside)
    (tmp_path / "run" / ".l.nash-jax-def.tmp").symlink_to(outside)  # a link of our shape: unlinked
    (tmp_path / "run" / ".theirs.tmp").write_text("x")
    ours = tmp_path / "run" / "iter_0" / ".samples.parquet.nash-jax-q9z.tmp"
    ours.parent.mkdir()
    ours.write_text("x")
    assert runs.remove_stale_temporaries(tmp_path / "run") == 2
    assert not ours.exists() and not (tmp_path / "run" / ".l.nash-jax-def.tmp").is_symlink()
    assert (outside / ".w.nash-jax-abc.tmp" / "keep.txt").is_file()
    assert (tmp_path / "run" / ".theirs.tmp").is_file()


def test_temporary_names_carry_the_nash_jax_marker(tmp_path):
    seen = []
    runs.write_atomically(tmp_path / "a.txt", lambda tmp: seen.append(Path(tmp).name)
                          or Path(tmp).write_text("a"))
    runs.write_dir_atomically(tmp_path / "d", lambda tmp: seen.append(Path(tmp).name))
    assert all(runs.is_own_temporary(name) for name in seen), seen
    assert not runs.is_own_temporary(".a.txt.abc.tmp")
