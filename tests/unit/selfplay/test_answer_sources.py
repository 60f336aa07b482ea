"""Answer sources of proposer-solver self-play on the built-in arithmetic task: the verifier's labels,
majority-vote labels (R-Zero) with their accuracy against a checker, the tasks an answer source refuses,
the tiny policies' prompts, and a task of one's own registered by name."""

import numpy as np
import pytest

from nash_jax import tasks  # noqa: F401  (registers the built-in tasks with answer_sources)
from nash_jax.selfplay import answer_sources
from nash_jax.selfplay.answer_sources import Proposal, Source

DOC = "the town alder has 12 bridges and 7 schools ."


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


class EchoTask(answer_sources.TermsPrompts):
    """A task of one's own: every proposal is valid and is its own answer."""

    name, kind, labelled_by = "echo", "seed", "verifier"

    def check(self, source, text):
        return Proposal(True, "", text, text.strip(), text.strip())

    def read(self, reply):
        return reply.strip() or None


def test_a_registered_task_is_named_by_its_name(monkeypatch):
    monkeypatch.setitem(answer_sources.TASKS, "echo", None)
    answer_sources.register_task("echo", f"{__name__}:EchoTask")
    assert answer_sources.task_class("echo") is EchoTask
    source = answer_sources.answer_source("verifier", "echo")
    scored = source.score(source.check(Source("s", "seed", "x"), "ab"), ["ab", "ba", ""])
    np.testing.assert_array_equal(scored.correct, [1, 0, 0])
    assert scored.unparsed == 1
