"""engine.loop.train_loop's per-step wall time: each step is charged its own work, the first and the
last included (the metrics are logged a step behind, so the time between two log calls would give
the first step two steps' work and the last almost none)."""

import time

import numpy as np
import pytest

from nash_jax import runs
from nash_jax.engine.loop import train_loop
from nash_jax.runs import RunDir

SLEEP_S = [0.3, 1.2, 0.6, 1.5]  # each step's host work, none alike, so a shift shows
SLACK_S = 0.25  # logging, a checkpoint, a loaded machine


def step_times(tmp_path, checkpoint_every):
    run = RunDir(tmp_path / "run")
    run.acquire()

    def work(step, state, extra, item):
        time.sleep(SLEEP_S[step])
        return {"w": state["w"] + 1.0}, extra, {"loss": np.float32(step)}

    start = time.perf_counter()
    state, _ = train_loop(run, "train", state={"w": np.zeros(2)}, total=len(SLEEP_S), work=work,
                          checkpoint_every=checkpoint_every)
    wall = time.perf_counter() - start
    assert float(state["w"][0]) == len(SLEEP_S)
    metrics = [m for m in runs.read_metrics(run.path / "metrics.jsonl") if m["stage"] == "train"]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    return [m["step_s"] for m in metrics], wall


def test_each_step_is_charged_its_own_work(tmp_path):
    times, wall = step_times(tmp_path, checkpoint_every=100)
    for measured, slept in zip(times, SLEEP_S):
        assert slept <= measured < slept + SLACK_S, (times, SLEEP_S)
    assert sum(times) <= wall < sum(times) + SLACK_S


def test_a_checkpoints_save_is_charged_to_the_step_after_it(tmp_path):
    """Step 2 checkpoints: its metrics are written before the save (a kill loses none), so the save
    goes to step 3, and no time goes uncounted."""
    times, wall = step_times(tmp_path, checkpoint_every=2)
    for step in (1, 2, 4):
        assert SLEEP_S[step - 1] <= times[step - 1] < SLEEP_S[step - 1] + SLACK_S, (times, SLEEP_S)
    assert times[2] >= SLEEP_S[2]
    assert sum(times) <= wall < sum(times) + SLACK_S
