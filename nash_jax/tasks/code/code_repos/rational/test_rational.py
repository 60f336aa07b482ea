import pytest

from rational import Rational, mediant


def test_lowest_terms():
    r = Rational(6, 8)
    assert (r.numerator, r.denominator) == (3, 4)


def test_sign_on_numerator():
    r = Rational(3, -6)
    assert (r.numerator, r.denominator) == (-1, 2)


def test_zero_denominator():
    with pytest.raises(ZeroDivisionError):
        Rational(1, 0)


def test_add_and_subtract():
    assert Rational(1, 2) + Rational(1, 3) == Rational(5, 6)
    assert Rational(1, 2) - Rational(1, 3) == Rational(1, 6)
    assert Rational(1, 4) - Rational(1, 4) == Rational(0)


def test_multiply_and_divide():
    assert Rational(2, 3) * Rational(3, 4) == Rational(1, 2)
    assert Rational(2, 3) / Rational(4, 9) == Rational(3, 2)


def test_ordering():
    assert Rational(1, 3) < Rational(1, 2)
    assert not Rational(1, 2) < Rational(1, 2)
    assert Rational(-1, 2) < Rational(1, 3)


def test_str():
    assert str(Rational(4, 2)) == "2"
    assert str(Rational(-3, 9)) == "-1/3"


def test_mediant_lies_between():
    a, b = Rational(1, 3), Rational(1, 2)
    m = mediant(a, b)
    assert m == Rational(2, 5)
    assert a < m < b
