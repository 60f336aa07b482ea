"""Matrices as lists of rows."""


def shape(m):
    return len(m), len(m[0]) if m else 0


def identity(n):
    return [[1 if i == j else 0 for j in range(n)] for i in range(n)]


def transpose(m):
    return [list(column) for column in zip(*m)]


def add(a, b):
    if shape(a) != shape(b):
        raise ValueError(f"cannot add shapes {shape(a)} and {shape(b)}")
    return [[x + y for x, y in zip(row_a, row_b)] for row_a, row_b in zip(a, b)]


def multiply(a, b):
    rows, inner = shape(a)
    if inner != len(b):
        raise ValueError(f"cannot multiply shapes {shape(a)} and {shape(b)}")
    columns = transpose(b)
    return [[sum(x * y for x, y in zip(row, column)) for column in columns] for row in a]


def trace(m):
    return sum(m[i][i] for i in range(min(shape(m))))
