"""The `nash-jax` command: one subcommand per job, each module adding its own (`add(commands)`).

    game     a tabular preference game solved exactly
    judge    preference matrices from any judge
    runs     run, report, rerank: a recipe run or resumed, and its report
    models   average, import-gguf: model directories written
    plan     whether a config's step fits its devices
    ssr      ssr-validate: the seven checks on one SSR bug artifact, sandboxed
"""

import argparse
import os
import signal
import sys

from nash_jax import __version__

# transformers announces at import that PyTorch is missing, which nash_jax never needs: the command's
# output is the run's own (an advisory, not a warning; TRANSFORMERS_NO_ADVISORY_WARNINGS=0 brings it back).
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

from nash_jax.cli import game, judge, models, plan, runs, ssr  # noqa: E402  (after the environment is set)
from nash_jax.cli.judge import read_judge_requests  # noqa: E402  (tests read it from here)
from nash_jax.judges.user_code import UserCodeError  # noqa: E402

__all__ = ["build_parser", "main", "read_judge_requests"]

SUBCOMMANDS = (game, judge, runs, models, plan, ssr)  # in the order `nash-jax --help` lists them


def build_parser():
    parser = argparse.ArgumentParser(
        prog="nash-jax", description="Game-theoretic preference optimisation (SPPO, Nash-MD) in JAX.")
    parser.add_argument("--version", action="version", version=f"nash-jax {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.add(commands)
    return parser


def main(argv=None):
    """Run a subcommand; known failures become one line on stderr and a non-zero exit status."""
    args = build_parser().parse_args(argv)
    _stop_safely_on_signals()
    try:
        status = args.handler(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"nash-jax {args.command}: error: {err}", file=sys.stderr)
        return 2
    except UserCodeError as err:  # the user's own frames (their code to fix), then one line
        resume = " (fix it and rerun the same command to resume)" if args.command in ("run", "report") else ""
        print(err.user_traceback(), end="", file=sys.stderr)
        print(f"nash-jax {args.command}: error: {err}{resume}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `nash-jax game --json | head`: the reader left; nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as err:  # a full disk, a read-only or missing directory, a permission
        where = f" ({err.filename})" if err.filename else ""
        print(f"nash-jax {args.command}: error: {err.strerror or err}{where}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # also runs.Interrupted
        from nash_jax.runs import Interrupted
        said = f" {err}" if isinstance(err, Interrupted) else ""
        resume = (" Rerun the same command to resume." if args.command in ("run", "report") else "")
        print(f"nash-jax {args.command}: interrupted.{said}{resume}", file=sys.stderr)
        return 130
    return status or 0


def _stop_safely_on_signals():
    """SIGINT and SIGTERM: a training loop stops after its step with a checkpoint; elsewhere at once
    (every stage writes whole files or none)."""
    from nash_jax import runs

    def stop(signum, frame):
        runs.request_stop()  # raises KeyboardInterrupt unless a training loop can stop safely
        print("nash-jax: stopping after this step, with a checkpoint (interrupt again to stop at once)",
              file=sys.stderr, flush=True)

    runs.clear_stop_request()  # a new command starts unstopped (main may run twice in one process)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)


if __name__ == "__main__":
    sys.exit(main())
