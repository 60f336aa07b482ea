import pytest

from bowling import frames, is_spare, is_strike, score


def test_gutter_game():
    assert score([0] * 20) == 0


def test_all_ones():
    assert score([1] * 20) == 20


def test_one_spare():
    assert score([5, 5, 3] + [0] * 17) == 16


def test_one_strike():
    assert score([10, 3, 4] + [0] * 16) == 24


def test_perfect_game():
    assert score([10] * 12) == 300


def test_all_spares_with_bonus():
    assert score([5] * 21) == 150


def test_bad_roll():
    with pytest.raises(ValueError):
        score([11] + [0] * 19)
    with pytest.raises(ValueError):
        score([-1] + [0] * 19)


def test_frames():
    rolls = [10, 7, 3, 9, 0] + [0] * 12 + [10, 10, 10]
    grouped = frames(rolls)
    assert len(grouped) == 10
    assert grouped[:3] == [[10], [7, 3], [9, 0]]
    assert grouped[-1] == [10, 10, 10]


def test_strike_and_spare():
    assert is_strike([10])
    assert is_spare([7, 3])
    assert not is_spare([10])
    assert not is_spare([4, 5])
