"""`nash-jax game`: a tabular preference game solved exactly."""

import json

from nash_jax.cli.arguments import int_in, positive_float

MAX_GAME_STEPS = 100_000  # `nash-jax game` keeps (and --json prints) one exploitability per step


def game_command(args):
    from nash_jax.evaluation import tabular
    from nash_jax.runs.files import check_output

    if args.plot:
        check_output(args.plot, "--plot", overwrite=args.overwrite, written=tabular.is_our_plot,
                     directory=False)
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


def add(commands):
    game = commands.add_parser(
        "game", help="solve a tabular preference game exactly (Nash, Bradley-Terry, RLHF, MWU, Nash-MD)",
        description="Solve a tabular preference game given as YAML/JSON (`responses` and `matrix` or "
                    "`wins`) and compare the solution concepts by exploitability.")
    game.add_argument("file", help="game file (YAML or JSON)")
    game.add_argument("--eta", type=positive_float, default=1.0, help="MWU step size (default 1.0)")
    game.add_argument("--steps", type=int_in(1, MAX_GAME_STEPS), default=1000,
                      help=f"MWU and Nash-MD steps, 1 to {MAX_GAME_STEPS} (default 1000)")
    game.add_argument("--beta", type=positive_float, default=0.1,
                      help="KL weight of the RLHF optimum (default 0.1)")
    game.add_argument("--tau", type=positive_float, nargs="+", default=[0.1, 0.02],
                      help="Nash-MD regularisation strengths (default 0.1 0.02)")
    game.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    game.add_argument("--plot", metavar="PNG", help="draw exploitability against step into PNG (a new "
                                                    "file)")
    game.add_argument("--overwrite", action="store_true",
                      help="let --plot replace a PNG that this command drew before (never another file)")
    game.set_defaults(handler=game_command)
