import pytest

from matrix import add, identity, multiply, shape, trace, transpose


def test_shape():
    assert shape([[1, 2, 3], [4, 5, 6]]) == (2, 3)
    assert shape([]) == (0, 0)


def test_identity():
    assert identity(3) == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]


def test_transpose():
    assert transpose([[1, 2, 3], [4, 5, 6]]) == [[1, 4], [2, 5], [3, 6]]


def test_add():
    assert add([[1, 2], [3, 4]], [[10, 20], [30, 40]]) == [[11, 22], [33, 44]]


def test_add_shape_mismatch():
    with pytest.raises(ValueError):
        add([[1, 2]], [[1], [2]])


def test_multiply():
    assert multiply([[1, 2], [3, 4]], [[5, 6], [7, 8]]) == [[19, 22], [43, 50]]
    assert multiply([[1, 2, 3]], [[1], [2], [3]]) == [[14]]


def test_multiply_by_identity():
    m = [[2, -1], [0, 3]]
    assert multiply(m, identity(2)) == m


def test_multiply_shape_mismatch():
    with pytest.raises(ValueError):
        multiply([[1, 2]], [[1, 2]])


def test_trace():
    assert trace([[1, 2], [3, 4]]) == 5
    assert trace([[1, 2, 3], [4, 5, 6]]) == 6
