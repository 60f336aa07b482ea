"""Small string helpers of the kind every project grows."""

import re

VOWELS = set("aeiou")


def is_palindrome(text):
    """Whether `text` reads the same both ways, ignoring case and anything but letters and digits."""
    kept = [char.lower() for char in text if char.isalnum()]
    return kept == kept[::-1]


def count_vowels(text):
    return sum(1 for char in text.lower() if char in VOWELS)


def title_case(text, small_words=("a", "an", "of", "the")):
    """Each word capitalised except small words after the first."""
    words = text.lower().split()
    return " ".join(word if i > 0 and word in small_words else word.capitalize()
                    for i, word in enumerate(words))


def reverse_words(text):
    return " ".join(reversed(text.split()))


def slugify(text):
    """Lower-case words joined by single hyphens, everything else dropped."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return "-".join(words)


def common_prefix(words):
    if not words:
        return ""
    prefix = words[0]
    for word in words[1:]:
        while not word.startswith(prefix):
            prefix = prefix[:-1]
    return prefix
