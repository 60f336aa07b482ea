"""Shared timing helpers for the benchmark scripts: warm-up excluded, best and median of repeats.

NASH_JAX_BENCH_CLOCK=process times every call in process CPU seconds (all threads of the process,
time.process_time) instead of wall seconds: on a shared machine, with the run pinned to one core
(`taskset -c 1`), that counts the work done and not the time other processes held the core. The
JSON lines then carry "clock": "process". Each implementation runs in its own process, so the
peer is timed by the same clock.
"""

import json
import os
import statistics
import time

CLOCKS = {"wall": time.perf_counter, "process": time.process_time}
CLOCK_NAME = os.environ.get("NASH_JAX_BENCH_CLOCK", "wall")
if CLOCK_NAME not in CLOCKS:
    raise ValueError(f"NASH_JAX_BENCH_CLOCK={CLOCK_NAME!r}; expected one of {sorted(CLOCKS)}")
CLOCK = CLOCKS[CLOCK_NAME]


def time_call(fn, *, repeats=5):
    """(compile_s, median_s): the first call (compilation, caches) timed apart from the rest."""
    compile_s, times = timings(fn, repeats=repeats)
    return compile_s, statistics.median(times)


def timings(fn, *, repeats=5):
    """(first call's seconds, [seconds of each of `repeats` further calls])."""
    start = CLOCK()
    fn()
    first = CLOCK() - start
    times = []
    for _ in range(repeats):
        start = CLOCK()
        fn()
        times.append(CLOCK() - start)
    return first, times


def interleaved_timings(fns, *, repeats=3):
    """{name: (first call's seconds, [seconds of each further call])} for a dict of callables timed
    in rounds, one call of each per round: on a shared machine a burst of load then falls on every
    side alike instead of on whichever ran during it."""
    result = {}
    for name, fn in fns.items():
        start = CLOCK()
        fn()
        result[name] = (CLOCK() - start, [])
    for _ in range(repeats):
        for name, fn in fns.items():
            start = CLOCK()
            fn()
            result[name][1].append(CLOCK() - start)
    return result


def emit(**fields):
    if CLOCK_NAME != "wall":
        fields["clock"] = CLOCK_NAME
    print(json.dumps(fields), flush=True)
