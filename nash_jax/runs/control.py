"""How a running process is stopped, killed on purpose and shown: stop requests (SIGINT, SIGTERM) that a
training loop honours at a safe point, crash points for the resume tests, and the progress bar."""

import os
import signal

CRASH_ENV = "NASH_JAX_CRASH_AT"  # fault injection for the resume tests: the name of a crash_point


def progress(total, desc, unit):
    """A progress bar on a terminal, nothing in logs."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True, mininterval=1.0, leave=False,
                disable=None)


class Interrupted(KeyboardInterrupt):
    """A run stopped on request (SIGINT, SIGTERM) at a safe point; rerunning resumes it."""


_stop = {"requested": False, "loop_depth": 0}


def request_stop():
    """Ask the running training loop to stop after its current step, with a checkpoint. Outside a
    training loop (or on a second request) stop at once: stages write whole files or none."""
    if _stop["requested"] or not _stop["loop_depth"]:
        raise KeyboardInterrupt
    _stop["requested"] = True


def stop_requested():
    return _stop["requested"]


def clear_stop_request():
    _stop["requested"] = False


class training_loop_running:
    """Context: a loop that checks stop_requested() after each step is running."""

    def __enter__(self):
        _stop["loop_depth"] += 1

    def __exit__(self, *exc):
        _stop["loop_depth"] -= 1


def crash_point(point):
    """Kill this process with SIGKILL when $NASH_JAX_CRASH_AT names `point` (tests of resumption)."""
    want = os.environ.get(CRASH_ENV)
    if want and want == point:
        os.kill(os.getpid(), signal.SIGKILL)
