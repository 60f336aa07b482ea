"""`nash-jax run`, `report` and `rerank`: a recipe run (or resumed) and its report."""

import contextlib
import sys
from pathlib import Path

from nash_jax.cli.arguments import add_process_flags, int_in, start_processes

MAX_BEST_OF_N = 64  # `nash-jax rerank` samples n per held-out sample and judges n × n pairs of them


def _run(args):
    from nash_jax import config as config_lib
    from nash_jax import engine
    start_processes(args)
    config = engine.resolve_run_dir(config_lib.load_config(args.config, args.overrides))
    resuming = (Path(config.run_dir) / "config.yaml").is_file()
    print(f"{'resuming' if resuming else 'run directory:'} {config.run_dir}", file=sys.stderr)
    report = engine.run(config)
    print_report_summary(config, report, config.run_dir)


def saved_run_config(run_dir, overrides=()):
    """A run directory's config (config.yaml), with report-only `eval.KEY=VALUE` overrides applied and,
    if they change it, saved back (so that the run's config lock accepts them)."""
    from nash_jax import config as config_lib
    from nash_jax import engine
    run_dir = Path(run_dir)
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; expected a run directory (made by `nash-jax "
                                "run`, holding config.yaml)")
    allowed = [f"eval.{name}" for name in config_lib.REPORT_ONLY_EVAL_FIELDS]
    for text in overrides:
        key = text.partition("=")[0].strip()
        if not any(key == a or key.startswith(a + ".") for a in allowed):
            raise ValueError(f"override {text!r}: a finished run's report may change only {allowed}; "
                             "other keys change what the run trained (start a new run_dir instead)")
    saved = config_lib.read_yaml(path)
    try:
        config = config_lib.build_run_config(config_lib.apply_overrides(saved, overrides), saved=True)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    for text in overrides:  # before anything is written: an option the run's report ignores
        engine.check_report_option(config, text.partition("=")[0].strip().split(".")[1],
                                    f"override {text!r}")
    if config.run_dir and Path(config.run_dir).resolve() != run_dir.resolve():
        import dataclasses
        config = dataclasses.replace(config, run_dir=str(run_dir))  # the directory was moved
    if overrides and config_lib.normalised(saved) != config_lib.to_dict(config):
        from nash_jax import parallel, runs
        if parallel.is_writer():
            run = runs.RunDir(run_dir)
            run.acquire()  # never rewrite the config of a run that is still going
            try:
                runs.write_text_atomically(path, config_lib.to_yaml(config))
            finally:
                run.close()
        parallel.barrier("report config")
    return config


def _report(args, overrides=None):
    from nash_jax import engine
    start_processes(args)
    with config_restored_on_failure(Path(args.run_dir) / "config.yaml"):
        config = saved_run_config(args.run_dir, args.overrides if overrides is None else overrides)
        report = engine.run(config)
    print_report_summary(config, report, args.run_dir)


@contextlib.contextmanager
def config_restored_on_failure(path):
    """Put `path` (a run's config.yaml) back as it was if the block fails or is interrupted: a report
    whose overrides were saved before its judge failed to load must not leave them behind for the
    next plain `report` to act on."""
    from nash_jax import parallel, runs
    before = path.read_text() if path.is_file() else None
    try:
        yield
    except BaseException:
        if before is not None and parallel.is_writer() and (not path.is_file()
                                                             or path.read_text() != before):
            runs.write_text_atomically(path, before)
        raise


def _rerank(args):
    from nash_jax import engine
    engine.check_report_option(saved_run_config(args.run_dir), "best_of_n", "nash-jax rerank")
    _report(args, [*args.overrides, f"eval.best_of_n={args.n}"])


def print_report_summary(config, report, run_dir):
    from nash_jax import engine
    for line in engine.summary_lines(config, report):
        print(line)
    print(f"report: {Path(run_dir) / 'report.md'}")


def add(commands):
    run = commands.add_parser(
        "run", help="run (or resume) a recipe from a YAML config (sppo, nash_md, grpo, proposer_solver, "
        "game_selfplay, ssr, or one of your own: docs/recipes)",
        description="Run the recipe a YAML config names, in RUN_DIR (run_dir=PATH; default "
                    "runs/<config name>-<timestamp>). Rerunning the same command on the same run "
                    "directory resumes it from the last finished stage or checkpoint.")
    run.add_argument("config", help="YAML config (see configs/)")
    run.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                     help="override any config field, dotted for nested ones (train.batch_size=32)")
    add_process_flags(run)
    run.set_defaults(handler=_run)

    report = commands.add_parser(
        "report", help="evaluate a run's iterates against each other and write its report",
        description="Finish (or redo) a run's evaluation: the cross-iteration win-rate table, lengths, "
                    "KL to the initial policy, and RUN_DIR/report.{json,md} with plots. Resumes the "
                    "run first if it is unfinished.")
    report.add_argument("run_dir", help="a run directory (holds config.yaml)")
    report.add_argument("overrides", nargs="*", metavar="eval.KEY=VALUE",
                        help="report-only settings to change: eval.average_iterates=true, "
                             "eval.best_of_n=N, eval.second_judge.kind=..., eval.saturation_threshold=X")
    add_process_flags(report)
    report.set_defaults(handler=_report)

    rerank = commands.add_parser(
        "rerank", help="add the last iterate reranked best-of-n by the training judge to a run's report",
        description="Sample n responses per held-out prompt from the run's last iterate, keep the one "
                    "with the highest win rate among them under the training judge, and evaluate it "
                    "like an iterate (the report's eval.best_of_n). Reranking with the judge the policy "
                    "was trained against compounds judge exploitation; the report labels it so. "
                    "eval.rerank_judge={kind: ..., ...} reranks with another judge instead.")
    rerank.add_argument("run_dir", help="a run directory (holds config.yaml)")
    rerank.add_argument("--n", type=int_in(2, MAX_BEST_OF_N), default=16,
                        help=f"candidates per sample, 2 to {MAX_BEST_OF_N} (default 16)")
    rerank.add_argument("overrides", nargs="*", metavar="eval.KEY=VALUE",
                        help="report-only eval fields, e.g. eval.rerank_judge={kind: pairrm, path: DIR}")
    add_process_flags(rerank)
    rerank.set_defaults(handler=_rerank)
