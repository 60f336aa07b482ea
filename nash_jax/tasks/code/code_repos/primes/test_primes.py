from primes import factorize, gcd, is_prime, lcm, primes_up_to


def test_small_primes():
    assert [n for n in range(20) if is_prime(n)] == [2, 3, 5, 7, 11, 13, 17, 19]


def test_squares_are_not_prime():
    assert not is_prime(49)
    assert not is_prime(121)


def test_sieve():
    assert primes_up_to(30) == [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]
    assert primes_up_to(2) == [2]
    assert primes_up_to(1) == []


def test_sieve_agrees_with_test():
    assert primes_up_to(200) == [n for n in range(201) if is_prime(n)]


def test_factorize():
    assert factorize(360) == [2, 2, 2, 3, 3, 5]
    assert factorize(97) == [97]
    assert factorize(1) == []
    assert factorize(49) == [7, 7]


def test_gcd():
    assert gcd(48, 18) == 6
    assert gcd(7, 0) == 7
    assert gcd(-12, 8) == 4


def test_lcm():
    assert lcm(4, 6) == 12
    assert lcm(5, 0) == 0
    assert lcm(7, 3) == 21
