"""configs/smollm2_proposer_solver.yaml shortened to one step: proposer–solver self-play on the real
SmolLM2-135M-Instruct through the CLI, as a user runs it. The full run's figures are in README ("A real
model on a laptop"); here: the pipeline, and that the anchors come out (held-out accuracy before and
after the step, the valid-proposal rate)."""

import pytest

from tests.recipes.conftest import run_on_real_model

pytestmark = pytest.mark.long

SHORTENED = ("proposer_solver.steps=1", "proposer_solver.anchors.snapshots=1",
             "proposer_solver.anchors.eval_every=1", "proposer_solver.sources_per_step=1",
             "proposer_solver.proposals_per_source=2", "proposer_solver.solvers_per_problem=2",
             "proposer_solver.proposer_max_tokens=12", "proposer_solver.solver_max_tokens=8",
             "proposer_solver.anchors.heldout_problems=4", "proposer_solver.anchors.sources=1",
             "proposer_solver.anchors.proposals_per_source=2",
             "train.micro_batches=2")  # 6 rows a step


@pytest.fixture(scope="module")
def finished_run(smollm2_dir, tmp_path_factory):
    return run_on_real_model("smollm2_proposer_solver", smollm2_dir, tmp_path_factory, SHORTENED)


def test_the_run_reports_heldout_accuracy_before_and_after_and_the_valid_proposal_rate(finished_run):
    _, stdout, report = finished_run
    anchors = report["anchors"]
    assert report["task"] == "arithmetic_chat" and anchors["step"] == [0, 1]
    assert all(0.0 <= v <= 1.0 for v in anchors["heldout_accuracy"] + anchors["valid_proposal_rate"])
    # greedy SmolLM2 answers some of "What is 3 * 4 + 5? Reply with just the number." right, read
    # from its reply's last integer: a broken template or reader would score nothing
    assert anchors["heldout_accuracy"][0] > 0.0, anchors
    first, last = anchors["heldout_accuracy"][0], anchors["heldout_accuracy"][-1]
    assert f"held-out accuracy (warm start -> final): {first:.3f} -> {last:.3f}" in stdout
    assert report["snapshots"]["labels"] == ["step_0", "step_1"]
    assert report["snapshots"]["heldout_accuracy"][0] == pytest.approx(first)
