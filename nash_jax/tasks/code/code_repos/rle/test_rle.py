import pytest

from rle import decode, encode, longest_run, runs


def test_runs():
    assert runs("aaabcc") == [("a", 3), ("b", 1), ("c", 2)]
    assert runs("") == []


def test_encode():
    assert encode("aaabcc") == "3a1b2c"
    assert encode("x") == "1x"


def test_encode_long_run():
    assert encode("z" * 12) == "12z"


def test_decode():
    assert decode("3a1b2c") == "aaabcc"
    assert decode("10q") == "q" * 10


def test_decode_rejects_garbage():
    with pytest.raises(ValueError):
        decode("3a4")
    with pytest.raises(ValueError):
        decode("ab")


def test_round_trip():
    for text in ("", "abc", "aabbbbccccc", "  ..!!"):
        assert decode(encode(text)) == text


def test_longest_run():
    assert longest_run("abbbcc") == ("b", 3)
    assert longest_run("aabb") == ("a", 2)
    assert longest_run("") == ("", 0)
