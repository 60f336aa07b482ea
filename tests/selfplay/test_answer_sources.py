"""Answer sources of proposer-solver self-play: document grounding (SPICE), majority-vote labels
(R-Zero) with their accuracy against a checker, and the shipped tokenizer and corpus."""

import numpy as np
import pytest

from nash_jax.selfplay import answer_sources
from nash_jax.tasks.arithmetic import vocabulary
from nash_jax.tasks.documents import documents
from nash_jax.selfplay.answer_sources import Source

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


def test_verifier_source_labels_by_the_parser():
    source = answer_sources.answer_source("verifier", "arithmetic")
    seed = Source("seed-0", "seed", "3 + 4")
    p = source.check(seed, "6 * 7")
    assert p.valid and p.gold == 42
    assert source.check(seed, "6 *").reason == "unexpected end of problem"
    scored = source.score(p, ["42", "41", "x", "answer: 42"])
    np.testing.assert_array_equal(scored.correct, [1, 0, 0, 1])
    assert scored.p_hat == 0.5 and scored.unparsed == 1


def test_majority_labels_ties_unparsed_and_accuracy_against_the_checker():
    source = answer_sources.answer_source("majority", "arithmetic")
    seed = Source("seed-0", "seed", "3 + 4")
    p = source.check(seed, "6 * 7")
    assert p.valid and p.gold is None and p.checker == 42  # no label until the solvers vote
    right = source.score(p, ["42", "41", "42", "x", "42"])
    assert right.label == 42 and right.p_hat == pytest.approx(3 / 5) and right.label_correct == 1.0 and right.unparsed == 1
    np.testing.assert_array_equal(right.correct, [1, 0, 1, 0, 1])
    wrong = source.score(p, ["41", "41", "42", "40"])  # the majority agrees on a wrong answer
    assert wrong.label == 41 and wrong.p_hat == 0.5 and wrong.label_correct == 0.0
    np.testing.assert_array_equal(wrong.correct, [1, 1, 0, 0])
    tie = source.score(p, ["40", "42", "42", "40"])  # ties go to the answer seen first (R-Zero)
    assert tie.label == 40 and tie.p_hat == 0.5
    none = source.score(p, ["x", "", "?", "no"])
    assert none.label is None and none.p_hat == 0.0 and none.unparsed == 4
    np.testing.assert_array_equal(none.correct, [0, 0, 0, 0])


def test_answer_sources_refuse_a_task_they_cannot_label():
    with pytest.raises(ValueError, match="answer source 'verifier' cannot label task 'document'"):
        answer_sources.answer_source("verifier", "document")
    with pytest.raises(ValueError, match="task 'chess'"):
        answer_sources.answer_source("majority", "chess")


def test_prompts_name_the_role_and_the_source():
    doc = Source("d", "document", DOC)
    assert answer_sources.proposer_prompt(doc).startswith("role: proposer source: document")
    assert DOC in answer_sources.proposer_prompt(doc)
    assert answer_sources.solver_prompt("document", "how many ?").startswith("role: solver source: document")
    assert DOC not in answer_sources.solver_prompt("document", "how many ?")
    assert answer_sources.solver_prompt("seed", "3 + 4") == "role: solver source: seed problem: 3 + 4 ="


def test_shipped_tokenizer_matches_a_rebuild_and_covers_the_corpus_and_prompts(tmp_path):
    from nash_jax.models.tokenizer import chat_prompt, load_tokenizer

    rebuilt = vocabulary.build_tokenizer(tmp_path / "tok")
    shipped = load_tokenizer(vocabulary.TOKENIZER_DIR)
    assert shipped.get_vocab() == rebuilt.get_vocab()
    unk = shipped.unk_token_id
    for row in documents.generate_corpus():
        for text in (answer_sources.proposer_prompt(Source("d", "document", row["text"])),
                     documents.demonstration(row["text"], np.random.default_rng(0))):
            ids = shipped(chat_prompt(shipped, text), add_special_tokens=False)["input_ids"]
            assert unk not in ids, text
    for text in ("role: solver source: seed problem: ( 3 + 4 ) * 9 / 7 =", "99"):
        assert unk not in shipped(text)["input_ids"]


def test_generated_corpus_round_trips_through_datasets(tmp_path):
    path = documents.write_corpus(tmp_path / "corpus.jsonl", seed=3)
    rows = documents.load_corpus(path)
    assert rows == documents.generate_corpus(3) and len(rows) == 32
    with pytest.raises(FileNotFoundError, match="does not exist"):
        documents.load_corpus(tmp_path / "missing.jsonl")
