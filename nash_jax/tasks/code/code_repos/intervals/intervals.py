"""Closed integer intervals as (start, end) pairs with start <= end."""


def merge(intervals):
    """The union of `intervals` as sorted, disjoint intervals; touching ones are joined."""
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def overlaps(first, second):
    """Whether two intervals share at least one point."""
    return first[0] <= second[1] and second[0] <= first[1]


def total_length(intervals):
    """How much of the line the intervals cover, counting overlaps once."""
    return sum(end - start for start, end in merge(intervals))


def insert(intervals, new):
    """Sorted disjoint `intervals` with `new` added, still sorted and disjoint."""
    return merge(list(intervals) + [new])


def gaps(intervals):
    """The open stretches between the merged intervals, as (end, next start) pairs."""
    merged = merge(intervals)
    return [(a[1], b[0]) for a, b in zip(merged, merged[1:])]
