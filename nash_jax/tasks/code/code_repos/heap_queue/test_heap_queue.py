import pytest

from heap_queue import PriorityQueue, k_smallest


def test_pop_in_order():
    queue = PriorityQueue([5, 1, 4, 2, 3])
    assert [queue.pop() for _ in range(5)] == [1, 2, 3, 4, 5]


def test_peek_is_minimum():
    queue = PriorityQueue([7, 3, 9])
    assert queue.peek() == 3
    assert len(queue) == 3


def test_push_after_pop():
    queue = PriorityQueue([4, 8])
    assert queue.pop() == 4
    queue.push(1)
    queue.push(6)
    assert [queue.pop(), queue.pop(), queue.pop()] == [1, 6, 8]


def test_duplicates():
    queue = PriorityQueue([2, 2, 1, 1])
    assert [queue.pop() for _ in range(4)] == [1, 1, 2, 2]


def test_empty_queue_raises():
    with pytest.raises(IndexError):
        PriorityQueue().pop()
    with pytest.raises(IndexError):
        PriorityQueue().peek()


def test_tuples_order_by_priority():
    queue = PriorityQueue([(3, "c"), (1, "a"), (2, "b")])
    assert [queue.pop()[1] for _ in range(3)] == ["a", "b", "c"]


def test_k_smallest():
    assert k_smallest([9, 4, 7, 1, 8, 2], 3) == [1, 2, 4]
    assert k_smallest([3, 1], 5) == [1, 3]
    assert k_smallest([], 2) == []


def test_many_items():
    items = [(i * 37) % 101 for i in range(101)]
    queue = PriorityQueue(items)
    assert [queue.pop() for _ in range(101)] == sorted(items)
