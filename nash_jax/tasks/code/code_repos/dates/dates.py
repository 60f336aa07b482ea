"""Calendar arithmetic on (year, month, day) triples of the Gregorian calendar."""

DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def is_leap(year):
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    if month == 2 and is_leap(year):
        return 29
    return DAYS_IN_MONTH[month - 1]


def day_of_year(year, month, day):
    """1 for January 1st, 365 (or 366) for December 31st."""
    return sum(days_in_month(year, m) for m in range(1, month)) + day


def add_days(year, month, day, days):
    """The date `days` (>= 0) days after the given one."""
    day += days
    while day > days_in_month(year, month):
        day -= days_in_month(year, month)
        month += 1
        if month > 12:
            month, year = 1, year + 1
    return year, month, day


def weekday(year, month, day):
    """0 for Monday ... 6 for Sunday (Zeller's congruence, shifted)."""
    if month < 3:
        month += 12
        year -= 1
    k, j = year % 100, year // 100
    h = (day + 13 * (month + 1) // 5 + k + k // 4 + j // 4 + 5 * j) % 7
    return (h + 5) % 7
