"""Document-grounded proposals (SPICE, tasks/documents/documents.py): grounding, the document task under
its answer source, and the generated corpus."""

import numpy as np
import pytest

from nash_jax.selfplay import answer_sources
from nash_jax.selfplay.answer_sources import Source
from nash_jax.tasks.documents import documents

DOC = "the town alder has 12 bridges and 7 schools ."


@pytest.mark.parametrize("question, answer, reason", [
    ("how many bridges does the town alder have ?", "12", ""),
    ("how many schools does the town alder have ?", "7", ""),
    ("how many bridges does the town alder have ?", "13", "answer is not a span of the document"),
    ("how many bridges does the town alder have ?", "12 bridges", ""),
    ("how many bridges ?", "bridges", "the question contains the answer"),
    ("does alder have 12 bridges ?", "12", "the question contains the answer"),
    ("how many bridges", "12", "does not end with '?'"),
    ("how many bridges does the town alder have ?", "", "empty answer"),
])
def test_document_answers_must_be_grounded(question, answer, reason):
    got = documents.check_grounded(DOC, question, answer)
    assert (reason in got) if reason else got == "", got


def test_document_source_checks_proposals_and_scores_against_the_gold_answer():
    source = answer_sources.answer_source("document", "document")
    doc = Source("town-alder", "document", DOC)
    good = source.check(doc, "question: how many bridges does the town alder have ? answer: 12")
    assert good.valid and good.gold == "12" and good.problem == "how many bridges does the town alder have ?"
    assert "12" not in good.problem  # solvers see the question only
    assert not source.check(doc, "how many bridges ? 12").valid
    assert source.check(doc, "question: how many wells does the town alder have ? answer: 3").reason == \
        "answer is not a span of the document"
    scored = source.score(good, ["12", "answer: 12 .", "7", ""])
    np.testing.assert_array_equal(scored.correct, [1, 1, 0, 0])
    assert scored.p_hat == 0.5 and scored.unparsed == 1


def test_generated_corpus_round_trips_through_datasets(tmp_path):
    path = documents.write_corpus(tmp_path / "corpus.jsonl", seed=3)
    rows = documents.load_corpus(path)
    assert rows == documents.generate_corpus(3) and len(rows) == 32
    with pytest.raises(FileNotFoundError, match="does not exist"):
        documents.load_corpus(tmp_path / "missing.jsonl")
