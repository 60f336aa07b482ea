"""Shared timing helpers for the benchmark scripts: warm-up excluded, best and median of repeats."""

import json
import statistics
import time


def time_call(fn, *, repeats=5):
    """(compile_s, median_s): the first call (compilation, caches) timed apart from the rest."""
    compile_s, times = timings(fn, repeats=repeats)
    return compile_s, statistics.median(times)


def timings(fn, *, repeats=5):
    """(first call's seconds, [seconds of each of `repeats` further calls])."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return first, times


def emit(**fields):
    print(json.dumps(fields), flush=True)
