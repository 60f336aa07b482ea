"""Exact fractions kept in lowest terms with a positive denominator."""

from math import gcd


class Rational:
    def __init__(self, numerator, denominator=1):
        if denominator == 0:
            raise ZeroDivisionError("a fraction cannot have denominator 0")
        if denominator < 0:
            numerator, denominator = -numerator, -denominator
        common = gcd(numerator, denominator)
        self.numerator = numerator // common
        self.denominator = denominator // common

    def __add__(self, other):
        return Rational(self.numerator * other.denominator + other.numerator * self.denominator,
                        self.denominator * other.denominator)

    def __sub__(self, other):
        return self + Rational(-other.numerator, other.denominator)

    def __mul__(self, other):
        return Rational(self.numerator * other.numerator, self.denominator * other.denominator)

    def __truediv__(self, other):
        return Rational(self.numerator * other.denominator, self.denominator * other.numerator)

    def __eq__(self, other):
        return (self.numerator, self.denominator) == (other.numerator, other.denominator)

    def __lt__(self, other):
        return self.numerator * other.denominator < other.numerator * self.denominator

    def __str__(self):
        if self.denominator == 1:
            return str(self.numerator)
        return f"{self.numerator}/{self.denominator}"


def mediant(a, b):
    """(a + c) / (b + d) of a/b and c/d: a fraction between the two."""
    return Rational(a.numerator + b.numerator, a.denominator + b.denominator)
