"""Issue 18's findings, each a test: run directories under concurrent starts, moves, corruption and
interrupts; bad files and bad flags as one clear line; the training loop's stop and skip rules."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from nash_jax import data, runs
from nash_jax.engine.loop import train_loop
from tests.processes import USER_CLI
from nash_jax.runs import RunDir

REPO = Path(__file__).parents[2]
FOUR = REPO / "configs" / "games" / "four_responses.yaml"


def cli(*args, stdin=None):
    return subprocess.run([*USER_CLI, *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_second_writer_is_refused_and_the_lock_of_a_finished_one_is_not_stale(tmp_path):
    run = RunDir(tmp_path / "run")
    run.acquire()
    probe = ("import sys; from nash_jax.runs import RunDir; r = RunDir(sys.argv[1]); r.acquire(); "
             "print('acquired')")
    busy = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "run")], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)
    assert busy.returncode != 0 and f"is in use by process {os.getpid()}" in busy.stderr, busy.stderr
    run.close()
    free = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "run")], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)
    assert free.stdout.strip() == "acquired", free.stderr


def test_temporaries_of_interrupted_writes_are_removed_when_the_run_resumes(tmp_path):
    RunDir(tmp_path / "run").finish("init", [])  # a run directory nash_jax made (its manifest)
    (tmp_path / "run" / "iter_0" / ".policy.nash-jax-abc.tmp").mkdir(parents=True)
    (tmp_path / "run" / "iter_0" / ".policy.nash-jax-abc.tmp" / "model.safetensors").write_bytes(b"x")
    (tmp_path / "run" / ".manifest.json.nash-jax-xyz.tmp").write_text("{")
    (tmp_path / "run" / "iter_0" / ".policy.nash-jax-old-q1.tmp").mkdir()
    run = RunDir(tmp_path / "run")
    run.acquire()
    run.close()
    assert not list((tmp_path / "run").rglob("*.tmp"))


def test_files_and_directories_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        runs.write_text_atomically(tmp_path / "report.md", "x")
        runs.write_dir_atomically(tmp_path / "policy", lambda d: (Path(d) / "a.json").write_text("{}"))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "report.md").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "policy").stat().st_mode) == 0o755


def test_a_missing_or_truncated_artifact_is_redone_from_its_stage_on(tmp_path):
    run = RunDir(tmp_path / "run")
    for name in ("a", "b", "c"):
        runs.write_text_atomically(tmp_path / "run" / f"{name}.txt", name * 100)
        run.finish(name, [f"{name}.txt"])
    assert run.verify() == []
    (tmp_path / "run" / "b.txt").write_text("b" * 10)  # truncated
    (tmp_path / "run" / "c" / "checkpoints" / "4").mkdir(parents=True)  # trained on the old b
    assert run.verify() == ["b", "c"]
    reread = RunDir(tmp_path / "run")
    assert list(reread.manifest["stages"]) == ["a"]
    assert not (tmp_path / "run" / "c" / "checkpoints").exists()
    runs.write_text_atomically(tmp_path / "run" / "report.md", "r")
    reread.finish("report", ["report.md"], leaf=True)
    reread.finish("d", [])
    (tmp_path / "run" / "report.md").unlink()
    assert reread.verify() == ["report"]  # nothing reads a leaf stage: the others stand
    with pytest.raises(FileNotFoundError, match=r"stage e: its artifact .*nope.txt is missing"):
        reread.finish("e", ["nope.txt"])


def test_an_unreadable_newest_checkpoint_falls_back_to_the_previous_one(tmp_path):
    manager = runs.checkpoint_manager(tmp_path / "ckpt", 1)
    like = {"state": {"w": jnp.zeros(3)}}
    for step in (1, 2):
        runs.save_checkpoint(manager, step, {"state": {"w": jnp.full(3, float(step))}}, {"data": step})
    for f in (tmp_path / "ckpt" / "2").rglob("*"):
        if f.is_file():
            f.write_bytes(b"")
    restored = runs.restore_checkpoint(manager, like)
    assert restored[0] == 1 and restored[2] == {"data": 1}
    np.testing.assert_array_equal(restored[1]["state"]["w"], np.ones(3))
    assert manager.all_steps() == [1]  # the damaged one is set aside, so step 2 can be saved again
    assert (tmp_path / "unreadable-checkpoint-2").is_dir()
    runs.save_checkpoint(manager, 2, {"state": {"w": jnp.full(3, 2.0)}}, {"data": 2})
    for f in (tmp_path / "ckpt").rglob("*"):
        if f.is_file():
            f.write_bytes(b"")
    with pytest.raises(ValueError, match=r"no checkpoint in .*ckpt can be read \(the newest, 2:"):
        runs.restore_checkpoint(manager, like)
    manager.close()


def test_changed_prompt_data_is_refused_on_resume(tmp_path):
    run = RunDir(tmp_path / "run")
    run.check_fingerprint("prompts", "aaa", source="data.path=p.jsonl")
    RunDir(tmp_path / "run").check_fingerprint("prompts", "aaa", source="data.path=p.jsonl")
    with pytest.raises(ValueError, match=r"data.path=p.jsonl has changed since this run started"):
        RunDir(tmp_path / "run").check_fingerprint("prompts", "bbb", source="data.path=p.jsonl")


@pytest.mark.parametrize("name, text, message", [
    ("empty.jsonl", "", r"empty.jsonl is empty; expected prompts"),
    ("bad.jsonl", '{"prompt": "a"}\n{"prompt": \n', r"bad.jsonl: cannot be read as prompts"),
    ("header.csv", "prompt\n", r"header.csv holds no rows; expected prompts"),
])
def test_bad_prompt_files_are_one_clear_error(tmp_path, name, text, message, capfd):
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=message):
        data.load_prompt_texts(tmp_path / name)
    out, err = capfd.readouterr()
    assert not out and not err, (out, err)  # no log line of datasets' beside the error


def test_a_damaged_manifest_or_a_file_as_run_directory_is_a_clear_error(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"manifest.json is not a manifest this program wrote"):
        RunDir(tmp_path / "run")
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"run directory .*file is a file"):
        RunDir(tmp_path / "file")


def test_the_command_says_one_line_for_os_errors_bad_flags_and_closed_pipes(tmp_path):
    result = cli("game", FOUR, "--plot", tmp_path)  # a directory where a PNG is wanted
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for flag in ("--eta", "--tau"):
        result = cli("game", FOUR, flag, "inf")
        assert result.returncode == 2 and "expected a positive finite number" in result.stderr
    piped = subprocess.run(f"{' '.join(USER_CLI)} game {FOUR} --json | head -c 5",
                           shell=True, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr, piped.stderr


@pytest.mark.parametrize("matrix", ["[[0.5, true], [false, 0.5]]", "[[0.5, '0.2'], [0.8, 0.5]]"])
def test_game_matrices_take_numbers_only(tmp_path, matrix):
    from nash_jax.evaluation.tabular import load_game

    path = tmp_path / "g.yaml"
    path.write_text(f"responses: [a, b]\nmatrix: {matrix}\n")
    with pytest.raises(ValueError, match=r"g.yaml: matrix\[0\]\[1\]=.*; expected a number"):
        load_game(path)


def loop_work(skip_from=None, stop_at=None):
    """A training loop's work without a model: the state counts steps and sums their indices."""
    def work(step, state, extra, item):
        if stop_at is not None and step + 1 == stop_at:
            runs.request_stop()
        skipped = float(skip_from is not None and step >= skip_from)
        state = {"w": state["w"] + step * (1.0 - skipped)}
        return state, extra, {"loss": jnp.float32(step), "skipped": jnp.float32(skipped),
                              "grad_norm": jnp.float32(np.nan if skipped else 1.0)}
    return work


def test_a_stop_request_checkpoints_the_step_and_a_rerun_ends_where_an_uninterrupted_run_ends(tmp_path):
    start = {"w": jnp.zeros(2)}
    whole, _ = train_loop(RunDir(tmp_path / "whole"), "s", state=start, total=10, work=loop_work(),
                          checkpoint_every=4)
    run = RunDir(tmp_path / "stopped")
    with runs.training_loop_running(), pytest.raises(runs.Interrupted, match="stopped after step 6"):
        train_loop(run, "s", state=start, total=10, work=loop_work(stop_at=6), checkpoint_every=4)
    runs.clear_stop_request()
    manager = runs.checkpoint_manager(tmp_path / "stopped" / "s" / "checkpoints", 4)
    assert manager.latest_step() == 6  # the stop's own checkpoint, off the every-4 interval
    manager.close()
    assert [m["step"] for m in runs.read_metrics(tmp_path / "stopped" / "metrics.jsonl")] == list(range(1, 7))
    resumed, _ = train_loop(RunDir(tmp_path / "stopped"), "s", state=start, total=10, work=loop_work(),
                            checkpoint_every=4)
    np.testing.assert_array_equal(resumed["w"], whole["w"])


def test_a_stop_request_outside_a_training_loop_stops_at_once():
    with pytest.raises(KeyboardInterrupt):
        runs.request_stop()


def test_too_many_skipped_steps_stop_the_run_naming_the_step(tmp_path):
    with pytest.raises(ValueError, match=r"s: step 4 was not applied \(loss=3, grad_norm=nan: not "
                                         r"finite\); 2 steps skipped so far"):
        train_loop(RunDir(tmp_path / "run"), "s", state={"w": jnp.zeros(2)}, total=10,
                   work=loop_work(skip_from=2), checkpoint_every=4, max_skipped_fraction=0.1)
