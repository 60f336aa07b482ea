import pytest

from stack import EmptyStackError, Stack, balanced, max_depth


def test_push_pop_order():
    s = Stack()
    for item in (1, 2, 3):
        s.push(item)
    assert [s.pop(), s.pop(), s.pop()] == [3, 2, 1]


def test_peek_does_not_remove():
    s = Stack()
    s.push("a")
    assert s.peek() == "a"
    assert len(s) == 1


def test_empty():
    s = Stack()
    assert s.is_empty()
    s.push(0)
    assert not s.is_empty()


def test_pop_empty_raises():
    with pytest.raises(EmptyStackError):
        Stack().pop()
    with pytest.raises(EmptyStackError):
        Stack().peek()


def test_balanced():
    assert balanced("([]{})")
    assert balanced("a(b)c")
    assert balanced("")


def test_unbalanced():
    assert not balanced("(]")
    assert not balanced("(()")
    assert not balanced("())")


def test_max_depth():
    assert max_depth("(()[{}])") == 3
    assert max_depth("()()") == 1
    assert max_depth("abc") == 0
