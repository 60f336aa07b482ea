"""Static shapes: sizes rounded up to a few buckets, and ragged rows padded into them.

Every jitted program compiles once per distinct input shape, so lengths and batch sizes go through
`bucket_size` before they reach one: a long run then compiles a handful of programs, not one per batch.
"""

import numpy as np


def bucket_size(n, buckets=None, *, minimum=1, multiple_of=1, what="size"):
    """The smallest bucket ≥ n: the next power of two (≥ minimum) by default, else the smallest of
    `buckets` that fits. The result is rounded up to a multiple of `multiple_of` (a mesh axis)."""
    if n < 1:
        raise ValueError(f"{what} must be at least 1; got {n}")
    if buckets:
        fitting = [b for b in sorted(buckets) if b >= n]
        if not fitting:
            raise ValueError(f"{what} {n} exceeds the largest bucket {max(buckets)}; "
                             f"configured buckets: {sorted(buckets)}")
        size = fitting[0]
    else:
        size = max(minimum, 1 << (n - 1).bit_length())
    return round_up(size, multiple_of)


def round_up(n, multiple):
    """The smallest multiple of `multiple` ≥ n."""
    return -(-n // multiple) * multiple


def left_pad(rows, width, pad_id):
    """(tokens [len(rows), width], segment_ids) with each row right-aligned; segment 0 = padding."""
    tokens = np.full((len(rows), width), pad_id, np.int32)
    segment_ids = np.zeros((len(rows), width), np.int32)
    for i, row in enumerate(rows):
        if len(row):
            tokens[i, width - len(row):] = row
            segment_ids[i, width - len(row):] = 1
    return tokens, segment_ids


def right_pad(rows, width, pad_id):
    """(tokens [len(rows), width], segment_ids) with each row left-aligned; segment 0 = padding."""
    tokens = np.full((len(rows), width), pad_id, np.int32)
    segment_ids = np.zeros((len(rows), width), np.int32)
    for i, row in enumerate(rows):
        tokens[i, :len(row)], segment_ids[i, :len(row)] = row, 1
    return tokens, segment_ids
