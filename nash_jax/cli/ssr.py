"""`nash-jax ssr-validate`: the seven SSR checks on one bug artifact, run in the sandbox."""


def ssr_validate_command(args):
    from nash_jax.tasks.code.ssr_validate import ssr_validate

    return ssr_validate(args.artifact_dir, as_json=args.json, isolation=args.isolation)


def add(commands):
    ssr = commands.add_parser(
        "ssr-validate", help="run the seven SSR consistency checks on one bug artifact, sandboxed",
        description="Check an artifact directory (bug_inject.diff, test_weaken.diff, test_files.txt, "
                    "repository) with pytest in the sandbox; exit 0 when all seven checks pass, 1 "
                    "naming the one that fails, 2 for an artifact that cannot be read.")
    ssr.add_argument("artifact_dir", help="the artifact directory")
    ssr.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ssr.add_argument("--isolation", choices=("required", "best_effort"), default="required",
                     help="required (default): stop where the sandbox cannot make its namespaces; "
                          "best_effort: run without them, naming what is off")
    ssr.set_defaults(handler=ssr_validate_command)
