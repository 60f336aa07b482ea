"""The `nash-jax` command: one subcommand per job."""

import argparse
import json
import sys

from nash_jax import __version__


def _game(args):
    from nash_jax import tabular

    g = tabular.load_game(args.file)
    summary = tabular.solve_game(g, eta=args.eta, steps=args.steps, beta=args.beta, taus=args.tau)
    if args.json:
        print(json.dumps(summary))
    else:
        print(tabular.format_summary(g, summary, title=str(args.file)))
    if args.plot:
        tabular.plot_traces(summary, args.plot, title=str(args.file))
        if not args.json:
            print(f"plot written to {args.plot}")


def _positive_float(text):
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number; got {text}")
    return value


def _positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer; got {text}")
    return value


def build_parser():
    parser = argparse.ArgumentParser(
        prog="nash-jax", description="Game-theoretic preference optimisation (SPPO, Nash-MD) in JAX.")
    parser.add_argument("--version", action="version", version=f"nash-jax {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    game = commands.add_parser(
        "game", help="solve a tabular preference game exactly (Nash, Bradley-Terry, RLHF, MWU, Nash-MD)",
        description="Solve a tabular preference game given as YAML/JSON (`responses` and `matrix` or "
                    "`wins`) and compare the solution concepts by exploitability.")
    game.add_argument("file", help="game file (YAML or JSON)")
    game.add_argument("--eta", type=_positive_float, default=1.0, help="MWU step size (default 1.0)")
    game.add_argument("--steps", type=_positive_int, default=1000,
                      help="MWU and Nash-MD steps (default 1000)")
    game.add_argument("--beta", type=_positive_float, default=0.1,
                      help="KL weight of the RLHF optimum (default 0.1)")
    game.add_argument("--tau", type=_positive_float, nargs="+", default=[0.1, 0.02],
                      help="Nash-MD regularisation strengths (default 0.1 0.02)")
    game.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    game.add_argument("--plot", metavar="PNG", help="draw exploitability against step into PNG")
    game.set_defaults(handler=_game)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        args.handler(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"nash-jax {args.command}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
