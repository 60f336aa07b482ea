"""Shared timing helpers for the benchmark scripts: warm-up excluded, median of repeats."""

import json
import statistics
import time


def time_call(fn, *, repeats=5):
    """(compile_s, median_s): the first call (compilation, caches) timed apart from the rest."""
    start = time.perf_counter()
    fn()
    compile_s = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return compile_s, statistics.median(times)


def emit(**fields):
    print(json.dumps(fields), flush=True)
