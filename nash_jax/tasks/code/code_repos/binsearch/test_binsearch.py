from binsearch import count, index_of, integer_sqrt, lower_bound, upper_bound

ITEMS = [1, 3, 3, 3, 5, 8, 13]


def test_lower_bound():
    assert lower_bound(ITEMS, 3) == 1
    assert lower_bound(ITEMS, 4) == 4
    assert lower_bound(ITEMS, 0) == 0
    assert lower_bound(ITEMS, 99) == 7


def test_upper_bound():
    assert upper_bound(ITEMS, 3) == 4
    assert upper_bound(ITEMS, 13) == 7
    assert upper_bound(ITEMS, 0) == 0


def test_index_of_present():
    assert index_of(ITEMS, 8) == 5
    assert index_of(ITEMS, 1) == 0
    assert index_of(ITEMS, 13) == 6


def test_index_of_absent():
    assert index_of(ITEMS, 4) == -1
    assert index_of(ITEMS, 100) == -1
    assert index_of([], 1) == -1


def test_count():
    assert count(ITEMS, 3) == 3
    assert count(ITEMS, 5) == 1
    assert count(ITEMS, 6) == 0


def test_integer_sqrt():
    assert [integer_sqrt(n) for n in (0, 1, 2, 3, 4, 8, 9, 10)] == [0, 1, 1, 1, 2, 2, 3, 3]
    assert integer_sqrt(10**6) == 1000
    assert integer_sqrt(10**6 - 1) == 999
