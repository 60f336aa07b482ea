import pytest

from roman import from_roman, is_roman, to_roman


def test_small_numbers():
    assert [to_roman(n) for n in range(1, 11)] == [
        "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X"]


def test_subtractive_pairs():
    assert to_roman(40) == "XL"
    assert to_roman(90) == "XC"
    assert to_roman(400) == "CD"
    assert to_roman(900) == "CM"


def test_large_number():
    assert to_roman(3999) == "MMMCMXCIX"
    assert to_roman(2024) == "MMXXIV"


def test_out_of_range():
    for bad in (0, 4000, -3):
        with pytest.raises(ValueError):
            to_roman(bad)


def test_from_roman():
    assert from_roman("MCMXCIV") == 1994
    assert from_roman("LVIII") == 58
    assert from_roman("IV") == 4
    assert from_roman("I") == 1


def test_round_trip():
    for n in (1, 4, 9, 14, 49, 99, 444, 1666, 3888):
        assert from_roman(to_roman(n)) == n


def test_is_roman_accepts_canonical():
    assert is_roman("XIV")
    assert is_roman("MMMCMXCIX")


def test_is_roman_rejects_others():
    assert not is_roman("")
    assert not is_roman("IIII")
    assert not is_roman("ABC")
    assert not is_roman("VX")
