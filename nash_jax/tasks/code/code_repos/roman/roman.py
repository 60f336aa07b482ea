"""Roman numerals: conversion both ways and a validity check."""

NUMERALS = [
    (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"),
    (100, "C"), (90, "XC"), (50, "L"), (40, "XL"),
    (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
]
VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def to_roman(number):
    """The Roman numeral of an integer from 1 to 3999."""
    if not 0 < number < 4000:
        raise ValueError(f"{number} is outside 1..3999")
    parts = []
    for value, letters in NUMERALS:
        count, number = divmod(number, value)
        parts.append(letters * count)
    return "".join(parts)


def from_roman(text):
    """The integer a Roman numeral stands for (subtractive pairs included)."""
    total = 0
    for i, letter in enumerate(text):
        value = VALUES[letter]
        if i + 1 < len(text) and VALUES[text[i + 1]] > value:
            total -= value
        else:
            total += value
    return total


def is_roman(text):
    """Whether `text` is a numeral in canonical form (the one to_roman writes)."""
    if not text or any(letter not in VALUES for letter in text):
        return False
    number = from_roman(text)
    return 0 < number < 4000 and to_roman(number) == text
