from anagrams import can_spell, group_anagrams, is_anagram, signature, spellable


def test_signature():
    assert signature("Listen") == "eilnst"
    assert signature("a b") == "ab"


def test_is_anagram():
    assert is_anagram("listen", "silent")
    assert is_anagram("Dormitory", "dirty room")


def test_not_anagram():
    assert not is_anagram("apple", "applf")
    assert not is_anagram("abc", "abd")
    assert not is_anagram("aab", "abb")


def test_word_is_not_its_own_anagram():
    assert not is_anagram("stop", "Stop")


def test_group_anagrams():
    words = ["eat", "tea", "tan", "ate", "nat", "bat"]
    assert group_anagrams(words) == [["eat", "tea", "ate"], ["tan", "nat"], ["bat"]]


def test_can_spell():
    assert can_spell("bee", "abeet")
    assert not can_spell("bee", "abet")
    assert can_spell("", "xyz")


def test_spellable():
    words = ["tea", "eat", "teeth", "a", "hat"]
    assert spellable(words, "aeth") == ["tea", "eat", "a", "hat"]
    assert spellable(words, "aeth", min_length=2) == ["tea", "eat", "hat"]
