"""What the subcommands' arguments share: argparse types with clear messages, the multi-process flags."""

import argparse
import math


def positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number; got {text}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive finite number; got {text}")
    return value


def int_in(low, high=None):
    """An argparse type: an integer in [low, high] (no upper bound without `high`)."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer; got {text}") from None
        if value < low or (high is not None and value > high):
            bounds = f"in [{low}, {high}]" if high is not None else f"≥ {low}"
            raise argparse.ArgumentTypeError(f"expected an integer {bounds}; got {text}")
        return value
    return parse


positive_int = int_in(1)


def add_process_flags(parser):
    group = parser.add_argument_group(
        "several processes (one per host; or several on one machine, with gloo on CPU)",
        "every process runs the same command; process 0 writes the run directory, which must be on "
        "a file system that all of them see")
    group.add_argument("--coordinator", metavar="HOST:PORT", help="address of process 0")
    group.add_argument("--num-processes", type=positive_int, default=1)
    group.add_argument("--process-id", type=int, default=0)


def start_processes(args):
    from nash_jax import parallel

    parallel.init_distributed(parallel.DistributedConfig(
        coordinator_address=args.coordinator, num_processes=args.num_processes,
        process_id=args.process_id))
