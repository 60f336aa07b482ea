import pytest

from grades import histogram, letter, mean, median, passed


def test_letters_at_boundaries():
    assert [letter(s) for s in (100, 90, 89, 80, 79, 70, 69, 60, 59, 0)] == [
        "A", "A", "B", "B", "C", "C", "D", "D", "F", "F"]


def test_letter_out_of_range():
    with pytest.raises(ValueError):
        letter(101)
    with pytest.raises(ValueError):
        letter(-1)


def test_mean():
    assert mean([70, 80, 90]) == 80
    assert mean([1, 2]) == 1.5


def test_median_odd_and_even():
    assert median([3, 1, 2]) == 2
    assert median([4, 1, 3, 2]) == 2.5


def test_empty_statistics():
    with pytest.raises(ValueError):
        mean([])
    with pytest.raises(ValueError):
        median([])


def test_histogram():
    assert histogram([95, 85, 85, 72, 10]) == {"A": 1, "B": 2, "C": 1, "D": 0, "F": 1}


def test_passed():
    assert passed([59, 60, 75, 12]) == [60, 75]
    assert passed([59, 60, 75], pass_mark=75) == [75]
