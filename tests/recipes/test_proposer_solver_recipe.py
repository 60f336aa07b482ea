"""`recipe: proposer_solver` end to end on a tiny model: anchors in report.json, resumption after
SIGKILL while proposing, while solving and after an update equal to an uninterrupted run, and two
processes that take the first step as one does."""

import json
import signal

import numpy as np
import pytest

from nash_jax.recipes import proposer_solver  # noqa: F401  (registers the recipe before the entry point)
from nash_jax.runs import read_metrics
from nash_jax.tasks.arithmetic import vocabulary
from tests.recipes.conftest import (assert_same_metrics, assert_same_parameters, nested_config, run_cli,
                                   run_two_processes, whole_run_of)

pytestmark = pytest.mark.long

IMPORTS = ["nash_jax.recipes.proposer_solver"]
# Every batch a multiple of the 8 test devices: 2 sources × 2 proposals × (1 + 3 solvers) = 16 rows.
TINY = {
    "imports": IMPORTS,
    "warm_start": {"steps": 80, "batch_size": 16, "hidden_size": 32},
    "train": {"checkpoint_every": 2},
    "proposer_solver": {"steps": 8, "sources_per_step": 2, "proposals_per_source": 2,
                        "solvers_per_problem": 3,
                        "anchors": {"eval_every": 4, "heldout_problems": 8, "sources": 4,
                                    "proposals_per_source": 2, "snapshots": 2, "archive_size": 16}},
}


def tiny_config(tmp_path, name="ps", base="proposer_solver_demo", **sections):
    return nested_config(tmp_path, base, name, TINY, sections)


@pytest.fixture(scope="module")
def whole_run(tmp_path_factory):
    return whole_run_of(tmp_path_factory, "proposer_solver", tiny_config)


def test_a_run_reports_its_anchors_over_evaluation_steps(whole_run):
    tmp, _, result = whole_run
    assert "held-out accuracy (warm start -> final)" in result.stdout
    report = json.loads((tmp / "whole" / "report.json").read_text())
    anchors = report["anchors"]
    assert anchors["step"] == [0, 4, 8]
    for key in ("heldout_accuracy", "valid_proposal_rate", "mean_learnability", "distinct_2",
                "cluster_entropy", "novelty", "signal_share"):
        assert len(anchors[key]) == 3, key
    assert all(0.0 <= v <= 1.0 for v in anchors["heldout_accuracy"] + anchors["valid_proposal_rate"])
    assert all(abs(sum(row) - 1.0) < 1e-6 or sum(row) == 0 for row in anchors["p_hat_distribution"])
    assert "pseudo_label_accuracy" not in anchors  # verifier mode
    table = report["snapshots"]
    assert table["labels"] == ["step_0", "step_4", "step_8"]
    assert np.shape(table["cross_accuracy"]) == (3, 3) and len(table["heldout_accuracy"]) == 3
    markdown = (tmp / "whole" / "report.md").read_text()
    assert "![anchors.png](anchors.png)" in markdown and (tmp / "whole" / "anchors.png").is_file()
    steps = [m for m in read_metrics(tmp / "whole" / "metrics.jsonl") if m["stage"] == "proposer_solver"]
    assert [m["step"] for m in steps] == list(range(1, 9))
    assert all(m["ratio_mean"] == pytest.approx(1.0, abs=1e-4) for m in steps)  # behaviour log-probs align
    assert any((tmp / "whole" / "tensorboard").iterdir())


def test_resuming_after_sigkill_while_proposing_solving_and_training_equals_an_uninterrupted_run(whole_run):
    tmp, path, _ = whole_run
    killed = tmp / "killed"
    for point in ("proposer_solver:propose:step=3", "proposer_solver:solve:step=6",
                  "proposer_solver:step=7"):
        result = run_cli(path, killed, crash_at=point)
        assert result.returncode == -signal.SIGKILL, (point, result.stderr[-3000:])
    result = run_cli(path, killed)
    assert result.returncode == 0, result.stderr[-3000:]
    for k in (0, 1):
        assert_same_parameters(killed / f"iter_{k}" / "policy", tmp / "whole" / f"iter_{k}" / "policy")
    assert_same_metrics(tmp / "whole", killed, "proposer_solver")
    a, b = (json.loads((d / "report.json").read_text()) for d in (tmp / "whole", killed))
    assert a["anchors"] == b["anchors"] and a["snapshots"] == b["snapshots"]


def test_two_processes_run_the_game_like_one(whole_run):
    """Two processes × 4 devices against one process × 8, both from the same π_0 (the one-process run's
    warm start: fitting it on two processes is the SFT tests' and the game recipe's): the same host
    decisions at the first step (proposals, checks, rewards), every step logged and one report. Later
    steps are not compared: 2 × 4 devices reduce in another order than 1 × 8, and a near-tie token that
    flips moves the rest of the trajectory (seen on another machine)."""
    tmp, _, _ = whole_run  # 2 steps of the same config: a constant schedule, so step 1 is as in 8
    path = tiny_config(tmp, name="two", model={"path": str(tmp / "whole" / "init" / "policy"),
                                               "tokenizer": str(vocabulary.TOKENIZER_DIR)},
                       proposer_solver={"steps": 2, "anchors": {"snapshots": 1}})
    codes, logs = run_two_processes(path, tmp / "two")
    assert codes == [0, 0], "\n\n".join(log[-3000:] for log in logs)
    ours, theirs = ([m for m in read_metrics(d / "metrics.jsonl") if m["stage"] == "proposer_solver"]
                    for d in (tmp / "whole", tmp / "two"))
    assert [m["step"] for m in theirs] == [1, 2]
    a, b = theirs[0], ours[0]
    assert set(a) == set(b)
    for key in {"valid_proposal_rate", "proposer_reward", "trained_rows", "solver_reward"} & set(b):
        assert a[key] == b[key], key
    assert json.loads((tmp / "two" / "report.json").read_text())["anchors"]["step"] == [0, 2]
