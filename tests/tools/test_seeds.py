"""tools/experiments/seeds.py: the table's figures are the runs' own (means, spreads and seed-paired
differences), and a sweep killed in a run resumes where it stopped."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.recipes.conftest import REPO
from tests.recipes.test_game_selfplay_recipe import tiny_config

pytestmark = pytest.mark.long

SCRIPT = REPO / "tools" / "experiments" / "seeds.py"
_spec = importlib.util.spec_from_file_location("seeds", SCRIPT)
seeds = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(seeds)


def test_the_table_is_the_mean_and_spread_of_each_seed_and_the_paired_difference():
    def report(values):
        return {"exploitability": {"step": [0, 5], "value": values}}

    results = {("advantage=rae", 1, 0): report([0.5, 0.2]), ("advantage=rae", 1, 1): report([0.4, 0.3]),
               ("advantage=grpo", 1, 0): report([0.5, 0.4]), ("advantage=grpo", 1, 1): report([0.4, 0.2])}
    summary = seeds.table(results, [0, 1])
    rae, grpo = summary["groups"]
    a = rae["anchors"]["exploitability"]
    assert a["per_seed"] == [[0.5, 0.2], [0.4, 0.3]]
    np.testing.assert_allclose(a["mean"], [0.45, 0.25])
    np.testing.assert_allclose(a["std"], [np.std([0.5, 0.4], ddof=1), np.std([0.2, 0.3], ddof=1)])
    (paired,) = summary["paired"]
    assert paired["difference"] == "advantage=grpo − advantage=rae"
    np.testing.assert_allclose(paired["per_seed"], [[0.0, 0.2], [0.0, -0.1]], atol=1e-12)
    np.testing.assert_allclose(paired["mean"][-1], 0.05)
    assert "| advantage=rae | 1 | exploitability | step 0: 0.4500 ± 0.0707 | step 5: 0.2500 ± 0.0707" in \
        seeds.markdown(summary, "cmd")
    # the proposer-solver recipe's anchors, and per-iterate fields for a recipe without either
    ps = seeds.anchors({"anchors": {"step": [0, 10], "heldout_accuracy": [0.2, 0.4],
                                    "p_hat_distribution": [[1.0], [0.5]]}})
    assert ps == {"heldout_accuracy": {"step": [0, 10], "value": [0.2, 0.4]}}
    rows = [{"iterate": "pi_0", "win": 0.5}, {"iterate": "pi_1", "win": 0.6}]
    assert seeds.anchors({"per_iterate": rows}) == {"win": {"step": [0, 1], "value": [0.5, 0.6]}}
    with_average = {"per_iterate": rows + [{"iterate": "average", "win": 0.7}],
                    "extra_rows": {"average": "the mean of the iterates"}}
    assert seeds.anchors(with_average)["win"]["value"] == [0.5, 0.6]
    # a game without an exact evaluator has no exploitability curve: its per-iterate fields instead
    assert seeds.anchors({"exploitability": {"step": [], "value": []}, "per_iterate": rows}) == \
        {"win": {"step": [0, 1], "value": [0.5, 0.6]}}
    with pytest.raises(SystemExit, match="at least two distinct values"):
        seeds.variants("game_selfplay.advantage=rae")


def test_a_sweep_folder_refuses_another_sweep_and_an_edited_config(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("name: c\n")
    args = seeds.parse([str(config), "--seeds", "2", "train.epochs=1"])
    seeds.check_same_sweep(tmp_path / "out", config, args)
    more = seeds.parse([str(config), "--seeds", "5", "--jobs", "2", "train.epochs=1"])
    seeds.check_same_sweep(tmp_path / "out", config, more)  # more seeds, more jobs: the same sweep
    with pytest.raises(SystemExit, match="holds the runs of another sweep"):
        seeds.check_same_sweep(tmp_path / "out", config, seeds.parse([str(config), "--seeds", "2"]))
    config.write_text("name: c\nseed: 3\n")
    with pytest.raises(SystemExit, match="holds the runs of another sweep"):
        seeds.check_same_sweep(tmp_path / "out", config, args)


def test_out_must_be_new_empty_or_a_sweeps_and_configs_are_checked_before_any_run(tmp_path, capsys):
    config = REPO / "configs" / "kuhn_demo.yaml"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "seeds.md").write_text("my notes")
    with pytest.raises(SystemExit, match=r"holds files \(seeds.md\) but no sweep.json"):
        seeds.main([str(config), "--seeds", "1", "--out", str(mine)])
    assert (mine / "seeds.md").read_text() == "my notes" and os.listdir(mine) == ["seeds.md"]
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit, match=r"--out .*file: a file is there"):
        seeds.main([str(config), "--seeds", "1", "--out", str(tmp_path / "file")])
    for argv, message in [(["--compare", "game_selfplay.no_such_key=1,2"], r"variant no_such_key=1: .*no_such_key"),
                          (["train.epochs=zero"], r"variant base: .*train.epochs")]:
        with pytest.raises(SystemExit, match=message):
            seeds.main([str(config), "--seeds", "1", "--out", str(tmp_path / "new"), *argv])
        assert not (tmp_path / "new").exists()


def sweep(config, out, *, crash_at=None):
    env = dict(os.environ)
    env.pop("NASH_JAX_CRASH_AT", None)
    if crash_at:
        env["NASH_JAX_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, str(SCRIPT), str(config), "--seeds", "2", "--devices", "1",
                           "--out", str(out), "game_selfplay.eval_every=2", "train.checkpoint_every=2"],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=900, check=False)


def test_a_sweep_killed_in_a_run_resumes_it_and_tabulates_every_seeds_report(tmp_path):
    config = tiny_config(tmp_path, steps=4, snapshots=1)
    out = tmp_path / "sweep"
    killed = sweep(config, out, crash_at="game_selfplay:step=3")  # seed 0, after its step-2 checkpoint
    assert killed.returncode != 0 and "seed_0 failed" in killed.stderr, killed.stderr[-2000:]
    assert not (out / "base" / "devices_1" / "seed_0" / "report.json").exists()
    assert not (out / "base" / "devices_1" / "seed_1").exists()

    resumed = sweep(config, out)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "[2/2] base · 1 devices · seed 1" in resumed.stdout
    log = (out / "base" / "devices_1" / "seed_0.log").read_text()
    assert f"resuming {out / 'base' / 'devices_1' / 'seed_0'}" in log  # went on, did not start over
    summary = json.loads((out / "seeds.json").read_text())
    (group,) = summary["groups"]
    e = group["anchors"]["exploitability"]
    reports = [json.loads((out / "base" / "devices_1" / f"seed_{s}" / "report.json").read_text())
               for s in (0, 1)]
    assert e["step"] == [0, 2, 4]
    assert e["per_seed"] == [r["exploitability"]["value"] for r in reports]
    np.testing.assert_allclose(e["mean"], np.mean(e["per_seed"], axis=0))
    assert e["per_seed"][0] != e["per_seed"][1]  # the seed reaches the run
    assert (out / "seeds.png").is_file() and "exploitability" in (out / "seeds.md").read_text()

    again = sweep(config, out)  # finished runs are read, not rerun
    assert again.returncode == 0 and again.stdout.count(": read") == 2, again.stdout
