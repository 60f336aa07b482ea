"""Run-length encoding of strings: "aaabcc" <-> "3a1b2c"."""

import re

_RUN = re.compile(r"(\d+)(\D)")


def runs(text):
    """The runs of `text` as (character, length) pairs, in order."""
    out = []
    for char in text:
        if out and out[-1][0] == char:
            out[-1] = (char, out[-1][1] + 1)
        else:
            out.append((char, 1))
    return out


def encode(text):
    """Each run written as its length then its character."""
    return "".join(f"{length}{char}" for char, length in runs(text))


def decode(encoded):
    """The text an encoding stands for; digits are not allowed as run characters."""
    if _RUN.sub("", encoded):
        raise ValueError(f"not a run-length encoding: {encoded!r}")
    return "".join(char * int(length) for length, char in _RUN.findall(encoded))


def longest_run(text):
    """The character of the longest run and its length (the first such run on a tie)."""
    best = ("", 0)
    for char, length in runs(text):
        if length > best[1]:
            best = (char, length)
    return best
