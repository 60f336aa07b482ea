from intervals import gaps, insert, merge, overlaps, total_length


def test_merge_overlapping():
    assert merge([(1, 3), (2, 6), (8, 10), (15, 18)]) == [(1, 6), (8, 10), (15, 18)]


def test_merge_touching():
    assert merge([(1, 4), (4, 5)]) == [(1, 5)]


def test_merge_nested_and_unsorted():
    assert merge([(5, 6), (1, 10), (2, 3)]) == [(1, 10)]


def test_merge_empty():
    assert merge([]) == []


def test_overlaps():
    assert overlaps((1, 5), (5, 8))
    assert overlaps((2, 3), (0, 10))
    assert not overlaps((1, 2), (3, 4))
    assert not overlaps((6, 9), (1, 5))


def test_total_length():
    assert total_length([(1, 3), (2, 6)]) == 5
    assert total_length([(0, 1), (10, 12)]) == 3


def test_insert():
    assert insert([(1, 2), (6, 9)], (2, 5)) == [(1, 5), (6, 9)]
    assert insert([(1, 2)], (7, 8)) == [(1, 2), (7, 8)]


def test_gaps():
    assert gaps([(1, 3), (6, 7), (9, 12)]) == [(3, 6), (7, 9)]
    assert gaps([(1, 5)]) == []
