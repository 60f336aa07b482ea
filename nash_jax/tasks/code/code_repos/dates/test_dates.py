from dates import add_days, day_of_year, days_in_month, is_leap, weekday


def test_leap_years():
    assert is_leap(2024)
    assert is_leap(2000)
    assert not is_leap(1900)
    assert not is_leap(2023)


def test_days_in_month():
    assert days_in_month(2023, 1) == 31
    assert days_in_month(2023, 4) == 30
    assert days_in_month(2023, 12) == 31


def test_february():
    assert days_in_month(2024, 2) == 29
    assert days_in_month(2023, 2) == 28


def test_day_of_year():
    assert day_of_year(2023, 1, 1) == 1
    assert day_of_year(2023, 3, 1) == 60
    assert day_of_year(2024, 3, 1) == 61
    assert day_of_year(2024, 12, 31) == 366


def test_add_days_within_month():
    assert add_days(2023, 5, 10, 5) == (2023, 5, 15)
    assert add_days(2023, 5, 10, 0) == (2023, 5, 10)


def test_add_days_across_months_and_years():
    assert add_days(2023, 1, 31, 1) == (2023, 2, 1)
    assert add_days(2023, 12, 31, 1) == (2024, 1, 1)
    assert add_days(2024, 2, 28, 1) == (2024, 2, 29)
    assert add_days(2023, 1, 1, 365) == (2024, 1, 1)


def test_weekday():
    assert weekday(2024, 1, 1) == 0
    assert weekday(2000, 2, 29) == 1
    assert weekday(2023, 12, 31) == 6
