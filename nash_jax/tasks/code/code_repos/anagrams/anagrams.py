"""Anagrams: detection, grouping and the words one can spell from a set of letters."""

from collections import Counter


def signature(word):
    return "".join(sorted(word.lower().replace(" ", "")))


def is_anagram(first, second):
    """Same letters, same counts, ignoring case and spaces; a word is not its own anagram."""
    if first.lower() == second.lower():
        return False
    return signature(first) == signature(second)


def group_anagrams(words):
    """Words grouped by their letters, groups in order of first appearance."""
    groups = {}
    for word in words:
        groups.setdefault(signature(word), []).append(word)
    return list(groups.values())


def can_spell(word, letters):
    """Whether `word` can be written with the tiles in `letters` (each used once)."""
    needed, have = Counter(word), Counter(letters)
    return all(have[char] >= count for char, count in needed.items())


def spellable(words, letters, min_length=1):
    return [word for word in words if len(word) >= min_length and can_spell(word, letters)]
