import pytest

from ring_buffer import RingBuffer, moving_average


def test_append_and_items():
    buffer = RingBuffer(3)
    buffer.append(1)
    buffer.append(2)
    assert buffer.items() == [1, 2]
    assert len(buffer) == 2


def test_overwrites_oldest():
    buffer = RingBuffer(3)
    for i in range(5):
        buffer.append(i)
    assert buffer.items() == [2, 3, 4]
    assert buffer.is_full()


def test_popleft():
    buffer = RingBuffer(2)
    buffer.append("a")
    buffer.append("b")
    buffer.append("c")
    assert buffer.popleft() == "b"
    assert buffer.items() == ["c"]


def test_popleft_empty():
    with pytest.raises(IndexError):
        RingBuffer(1).popleft()


def test_bad_capacity():
    with pytest.raises(ValueError):
        RingBuffer(0)


def test_wraps_after_pops():
    buffer = RingBuffer(3)
    for i in range(3):
        buffer.append(i)
    buffer.popleft()
    buffer.popleft()
    buffer.append(7)
    buffer.append(8)
    assert buffer.items() == [2, 7, 8]
    assert buffer.is_full()


def test_moving_average():
    assert moving_average([2, 4, 6, 8], 2) == [2, 3, 5, 7]
    assert moving_average([3, 3, 9], 3) == [3, 3, 5]
