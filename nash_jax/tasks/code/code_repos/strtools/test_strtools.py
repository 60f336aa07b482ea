from strtools import common_prefix, count_vowels, is_palindrome, reverse_words, slugify, title_case


def test_palindromes():
    assert is_palindrome("racecar")
    assert is_palindrome("A man, a plan, a canal: Panama")
    assert is_palindrome("")


def test_not_palindromes():
    assert not is_palindrome("python")
    assert not is_palindrome("ab")


def test_count_vowels():
    assert count_vowels("Education") == 5
    assert count_vowels("rhythm") == 0


def test_title_case():
    assert title_case("the lord OF the rings") == "The Lord of the Rings"
    assert title_case("a tale") == "A Tale"


def test_reverse_words():
    assert reverse_words("one two  three") == "three two one"


def test_slugify():
    assert slugify("Hello, World!") == "hello-world"
    assert slugify("  Rock & Roll 101 ") == "rock-roll-101"


def test_common_prefix():
    assert common_prefix(["flower", "flow", "flight"]) == "fl"
    assert common_prefix(["dog", "car"]) == ""
    assert common_prefix(["same", "same"]) == "same"
    assert common_prefix([]) == ""
