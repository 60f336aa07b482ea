import pytest

from arith_tokens import evaluate, to_postfix, tokenize


def test_tokenize_numbers_and_operators():
    assert tokenize("12+3") == [12, "+", 3]


def test_tokenize_skips_spaces_and_keeps_parentheses():
    assert tokenize(" (1 + 20) * 3 ") == ["(", 1, "+", 20, ")", "*", 3]


def test_tokenize_rejects_letters():
    with pytest.raises(ValueError):
        tokenize("1 + x")


def test_postfix_precedence():
    assert to_postfix(tokenize("1+2*3")) == [1, 2, 3, "*", "+"]
    assert to_postfix(tokenize("1*2+3")) == [1, 2, "*", 3, "+"]


def test_postfix_left_associative():
    assert to_postfix(tokenize("8-3-2")) == [8, 3, "-", 2, "-"]


def test_postfix_parentheses():
    assert to_postfix(tokenize("(1+2)*3")) == [1, 2, "+", 3, "*"]


def test_evaluate():
    assert evaluate("2+3*4") == 14
    assert evaluate("(2+3)*4") == 20
    assert evaluate("10-4-3") == 3


def test_evaluate_division():
    assert evaluate("7/2") == 3
    assert evaluate("100/10/5") == 2


def test_evaluate_single_number():
    assert evaluate("42") == 42
