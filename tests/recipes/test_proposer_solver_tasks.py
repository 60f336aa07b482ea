"""`recipe: proposer_solver` beyond the arithmetic verifier run: a verifier that fails is named with its
problem and step, and the document task runs under majority vote with alternating phases (in a module of
its own, beside the shared runs of test_proposer_solver_recipe.py)."""

import pytest

from nash_jax import engine
from nash_jax.config import load_config
from nash_jax.runs import read_metrics
from nash_jax.selfplay import answer_sources
from nash_jax.tasks.arithmetic import arithmetic
from tests.recipes.test_proposer_solver_recipe import tiny_config

pytestmark = pytest.mark.long


class RaisingArithmetic(arithmetic.ArithmeticTask):
    """An arithmetic verifier that breaks on the 12th proposal it checks: the step-0 anchors check 8,
    so the 12th is the last of training step 1's 4."""

    name = "raising_arithmetic"
    calls = 0

    def check(self, source, text):
        RaisingArithmetic.calls += 1
        if RaisingArithmetic.calls >= 12:
            raise ValueError("the verifier broke")
        return super().check(source, text)


def test_a_verifier_that_raises_stops_the_run_naming_the_problem_and_the_step(tmp_path, monkeypatch):
    monkeypatch.setitem(answer_sources.TASKS, "raising_arithmetic", RaisingArithmetic)
    RaisingArithmetic.calls = 0
    path = tiny_config(tmp_path, proposer_solver={"task": {"name": "raising_arithmetic"}})
    with pytest.raises(RuntimeError, match=r"^training, step 1: the verifier answer source failed checking "
                                           r"the proposal '[^']*' from source 'seed-\d+': ValueError: "
                                           r"the verifier broke$"):
        engine.run(load_config(path, [f"run_dir={tmp_path / 'run'}"]))


def test_the_document_task_under_majority_vote_with_alternating_phases(tmp_path):
    path = tiny_config(tmp_path, name="doc", base="proposer_solver_document",
                       proposer_solver={"answer_source": "majority", "schedule": "alternating",
                                        "phase_steps": 2, "proposer_max_tokens": 20,
                                        "task": {"heldout_documents": 4}})
    report = engine.run(load_config(path, [f"run_dir={tmp_path / 'run'}"]))
    assert report["task"] == "document" and report["answer_source"] == "majority"
    assert len(report["anchors"]["pseudo_label_accuracy"]) == 3
    steps = [m for m in read_metrics(tmp_path / "run" / "metrics.jsonl") if m["stage"] == "proposer_solver"]
    assert [m["phase"] for m in steps] == [0, 0, 1, 1, 0, 0, 1, 1]  # proposer phases, then solver phases
    assert (tmp_path / "run" / "data" / "corpus.jsonl").is_file()
