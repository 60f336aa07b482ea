import pytest

from wrapping import center, justify, truncate, wrap


def test_wrap_basic():
    assert wrap("the quick brown fox jumps", 10) == ["the quick", "brown fox", "jumps"]


def test_wrap_exact_width():
    assert wrap("abc def", 7) == ["abc def"]
    assert wrap("abc def", 6) == ["abc", "def"]


def test_wrap_long_word():
    assert wrap("a enormousword b", 5) == ["a", "enormousword", "b"]


def test_wrap_empty_and_bad_width():
    assert wrap("   ", 4) == []
    with pytest.raises(ValueError):
        wrap("x", 0)


def test_truncate():
    assert truncate("hello world", 8) == "hello..."
    assert truncate("short", 5) == "short"
    assert truncate("abcdef", 4, ellipsis="~") == "abc~"


def test_center():
    assert center("ab", 6) == "  ab  "
    assert center("ab", 5, "*") == "*ab**"
    assert center("toolong", 3) == "toolong"


def test_justify():
    assert justify("a b c", 9) == "a   b   c"
    assert justify("aa b c", 9) == "aa   b  c"


def test_justify_single_word():
    assert justify("word", 6) == "word  "
