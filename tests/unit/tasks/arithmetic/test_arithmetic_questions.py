"""The arithmetic task of the real-model SPPO config: questions, answers read back, verdicts and the
verifier-backed preference, against values worked out by hand."""

import numpy as np
import pytest

from nash_jax.tasks.arithmetic import arithmetic_questions as q


def test_every_wording_reads_back_its_operands():
    for text, op in q.QUESTIONS:
        question = text.format(a=17, b=8)
        assert q.answer_of(question) == (25 if op == "+" else 9), question


def test_questions_are_different_problems_fixed_by_the_seed():
    questions = q.prompt_texts(len(q.problems()), seed=3)
    assert questions == q.prompt_texts(len(q.problems()), seed=3)
    assert questions != q.prompt_texts(len(q.problems()), seed=4)
    assert len({q.problem_of(question) for question in questions}) == len(questions)
    assert {q.problem_of(question) for question in questions} == set(q.problems())
    assert all(0 <= q.answer_of(question) <= q.MAX_FIRST + q.MAX_SECOND for question in questions)


def test_too_many_questions_and_foreign_text_are_refused():
    with pytest.raises(ValueError, match="375 different problems"):
        q.prompt_texts(376)
    with pytest.raises(ValueError, match="not one of the arithmetic task's questions"):
        q.answer_of("What is the capital of France?")


@pytest.mark.parametrize("response, correct, formatted", [
    ("21", True, True), ("21.", True, True), (" 21\n", True, True),
    ("14 + 7 = 21", True, False), ("The answer is 21.", True, False),
    ("14 + 7 = 20", False, False), ("20", False, True), ("twenty-one", False, False),
    ("", False, False), ("21 apples, or 22", False, False), ("2.5", False, False)])
def test_verdicts_read_the_last_integer_and_the_bare_number(response, correct, formatted):
    [verdict] = q.verdicts(["What is 14 plus 7? Reply with just the number."], [response])
    assert verdict == {"answer": 21, "correct": correct, "formatted": formatted}


def test_the_preference_puts_correct_first_and_the_bare_number_second():
    prompt = "What is 9 minus 4? Reply with just the number."
    candidates = ["5", "9 - 4 = 5", "6", "9 - 4 = 6"]  # scores 3, 2, 1, 0
    pref = q.prefer_correct([prompt], [candidates])[0]
    expected = np.array([[0.5, 1, 1, 1], [0, 0.5, 1, 1], [0, 0, 0.5, 1], [0, 0, 0, 0.5]])
    np.testing.assert_array_equal(pref, expected)
    tie = q.prefer_correct([prompt], [["7", "8"]])[0]  # two wrong bare numbers: a tie
    np.testing.assert_array_equal(tie, np.full((2, 2), 0.5))
