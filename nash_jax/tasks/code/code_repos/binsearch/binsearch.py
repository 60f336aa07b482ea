"""Binary search over sorted lists, in its common variants."""


def lower_bound(items, target):
    """The first index whose item is >= target (len(items) if none)."""
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


def upper_bound(items, target):
    """The first index whose item is > target (len(items) if none)."""
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] <= target:
            lo = mid + 1
        else:
            hi = mid
    return lo


def index_of(items, target):
    """An index of `target` in `items`, or -1 when it is absent."""
    i = lower_bound(items, target)
    return i if i < len(items) and items[i] == target else -1


def count(items, target):
    return upper_bound(items, target) - lower_bound(items, target)


def integer_sqrt(n):
    """The largest r with r * r <= n, by bisection."""
    lo, hi = 0, n + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if mid * mid <= n:
            lo = mid
        else:
            hi = mid
    return lo
