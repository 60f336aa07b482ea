"""The arithmetic verifier: a parser (no eval) that computes exact answers and refuses malformed,
out-of-range and hostile problems with a reason; tolerant reading of solver replies."""

import time

import numpy as np
import pytest

from nash_jax.tasks.arithmetic import arithmetic
from nash_jax.tasks.arithmetic.arithmetic import extract_answer, parse_problem


@pytest.mark.parametrize("text, answer", [
    ("3 + 4", 7), ("3+4*2", 11), ("( 3 + 4 ) * 2", 14), ("9 - 2 - 3", 4), ("8 / 2 / 2", 2),
    ("7 * 7 + 9 - 8", 50), ("problem: 6 * 7 =", 42), ("2 * ( 3 + ( 4 - 1 ) )", 12), ("0 * 0", 0),
    ("99 - 0", 99), ("  5*5  = ?", 25),
])
def test_valid_problems_get_their_exact_answer(text, answer):
    parsed = parse_problem(text)
    assert parsed.ok and parsed.answer == answer, parsed


@pytest.mark.parametrize("text, reason", [
    ("", "empty problem"), ("3 +", "unexpected end"), ("( 3 + 4", "unbalanced"), ("3 4", "unexpected '4'"),
    ("3 + + 4", "unexpected '+'"), ("- 3 + 4", "unexpected '-'"), ("three + 4", "unexpected 't'"),
    ("3 ** 2", "unexpected '*'"), ("__import__('os')", "unexpected '_'"), ("3 + 4 )", "after the expression"),
    ("7", "fewer than 1 operation"), ("( 42 )", "fewer than 1 operation"), ("7 / 2", "inexact division"), ("5 - 9", "outside [0, 99]"), ("50 + 50", "outside [0, 99]"),
])
def test_malformed_and_out_of_range_problems_are_invalid_with_a_reason(text, reason):
    parsed = parse_problem(text)
    assert not parsed.ok and parsed.answer is None
    assert reason in parsed.reason, parsed.reason


def test_hostile_problems_are_refused_quickly():
    hostile = {
        "huge literal": "9" * 100 + " + 1",
        "huge product": " * ".join(["9999"] * 10),
        "huge, short": "9999 * 9999 * 9999",
        "deep nesting": "(" * 40 + "1" + ")" * 40,
        "deep nesting, long": "(" * 5000 + "1" + ")" * 5000,
        "division by zero": "4 / ( 2 - 2 )",
        "division by zero, plain": "1 / 0",
        "very long": " + ".join(["1"] * 10_000),
    }
    for name, text in hostile.items():
        start = time.perf_counter()
        parsed = parse_problem(text)
        elapsed = time.perf_counter() - start
        assert not parsed.ok, (name, parsed)
        assert elapsed < 0.05, f"{name}: {elapsed:.3f} s"
    assert parse_problem(hostile["huge literal"]).reason == "number beyond ±10000"
    assert parse_problem(hostile["huge, short"]).reason == "intermediate value beyond ±10000"
    assert parse_problem("(" * 7 + "1 + 1" + ")" * 7).reason == "nesting deeper than 6"
    assert parse_problem("(" * 6 + "1 + 1" + ")" * 6).ok
    assert parse_problem(hostile["division by zero"]).reason == "division by zero"
    assert parse_problem(hostile["very long"]).reason.startswith("longer than")


@pytest.mark.parametrize("reply, answer", [
    ("11", 11), ("answer: 11", 11), ("= 11 .", 11), ("11 11 11", 11), ("the answer is 7 then 8", 7),
    ("-3", -3), ("", None), ("answer:", None), ("no idea", None), ("1234567", None),
])
def test_answers_are_read_tolerantly(reply, answer):
    assert extract_answer(reply) == answer


def test_the_verifier_scores_exact_answers_and_refuses_unchecked_problems():
    verifier = arithmetic.ArithmeticVerifier()
    np.testing.assert_array_equal(verifier.rewards(["3 + 4", "3 + 4", "6 * 7"], ["7", "8", "answer: 42"]),
                                  [1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match=r"problem 0 '1 / 0' is not a valid arithmetic problem "
                                         r"\(division by zero\)"):
        verifier.rewards(["1 / 0"], ["1"])


def test_drawn_problems_are_valid_distinct_and_avoid_the_excluded():
    held = arithmetic.random_problems(20, seed=1)
    drawn = arithmetic.random_problems(50, seed=2, exclude={p for p, _ in held})
    assert len({p for p, _ in drawn}) == 50
    assert not {p for p, _ in drawn} & {p for p, _ in held}
    for text, answer in held + drawn:
        assert parse_problem(text).answer == answer
    rng = np.random.default_rng(0)
    assert not any(parse_problem(arithmetic.malformed_problem(rng)).ok for _ in range(50))
