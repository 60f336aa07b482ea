"""The `nash-jax` command: one subcommand per job."""

import argparse
import json
import math
import os
import signal
import sys
from pathlib import Path

from nash_jax import __version__

# transformers announces at import that PyTorch is missing, which nash_jax never needs: the command's
# output is the run's own (an advisory, not a warning; TRANSFORMERS_NO_ADVISORY_WARNINGS=0 brings it back).
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def _game(args):
    from nash_jax import tabular
    from nash_jax.files import check_output

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


def _judge(args):
    from nash_jax import config as config_lib
    from nash_jax import judges

    values = {"kind": "pairrm", "path": args.model, "mode": args.mode, "batch_size": args.batch_size}
    for text in args.settings:
        keys, value = config_lib.parse_override(text)
        values[".".join(keys)] = value
    judge_config = config_lib.build(config_lib.JudgeConfig, values, "judge")
    prompts, candidates = read_judge_requests(args.prompts)
    judge = judges.make_judge(judge_config)
    per_call = judge_config.prompts_per_call
    for start in range(0, len(prompts), per_call):
        chunk = slice(start, start + per_call)
        matrices, notes = judge.judgments(prompts[chunk], candidates[chunk])
        for offset, matrix in enumerate(matrices):
            print(json.dumps({"index": start + offset, "matrix": matrix.tolist(),
                              "win_rates": matrix.mean(axis=1).tolist(),
                              **{name: float(values[offset]) for name, values in notes.items()}}),
                  flush=True)


def _ssr_validate(args):
    from nash_jax.selfplay.ssr_validate import ssr_validate

    return ssr_validate(args.artifact_dir, as_json=args.json)


def _plan(args):
    from nash_jax import config as config_lib
    from nash_jax import plan, recipes

    config = config_lib.load_config(args.config, args.overrides)
    memory = (config_lib.parse_bytes(args.device_memory, "--device-memory")
              if args.device_memory else None)
    result = plan.plan(config, devices=args.devices, device_memory=memory, shape=args.shape,
                       compile_step=not args.no_compile, **recipes.plan_inputs(config))
    print(plan.to_json(result) if args.json else plan.table(result), flush=True)
    problem = plan.shortfall(result)
    if problem:
        raise ValueError(problem)


def _start_processes(args):
    from nash_jax import parallel

    parallel.init_distributed(parallel.DistributedConfig(
        coordinator_address=args.coordinator, num_processes=args.num_processes,
        process_id=args.process_id))


def _run(args):
    from nash_jax import config as config_lib
    from nash_jax import recipes

    _start_processes(args)
    config = recipes.resolve_run_dir(config_lib.load_config(args.config, args.overrides))
    resuming = (Path(config.run_dir) / "config.yaml").is_file()
    print(f"{'resuming' if resuming else 'run directory:'} {config.run_dir}", file=sys.stderr)
    report = recipes.run(config)
    _print_report_summary(config, report, config.run_dir)


def saved_run_config(run_dir, overrides=()):
    """A run directory's config (config.yaml), with report-only `eval.KEY=VALUE` overrides applied and,
    if they change it, saved back (so that the run's config lock accepts them)."""
    from nash_jax import config as config_lib
    from nash_jax import recipes

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
        config = config_lib.build_run_config(config_lib.apply_overrides(saved, overrides))
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    for text in overrides:  # before anything is written: an option the run's report ignores
        recipes.check_report_option(config, text.partition("=")[0].strip().split(".")[1],
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
    from nash_jax import recipes

    _start_processes(args)
    config = saved_run_config(args.run_dir, args.overrides if overrides is None else overrides)
    _print_report_summary(config, recipes.run(config), args.run_dir)


def _rerank(args):
    from nash_jax import recipes

    recipes.check_report_option(saved_run_config(args.run_dir), "best_of_n", "nash-jax rerank")
    _report(args, [*args.overrides, f"eval.best_of_n={args.n}"])


def _average(args):
    from nash_jax import components, recipes
    from nash_jax.files import check_output
    from nash_jax.iterate_averaging import average_policies
    from nash_jax.runs import RunDir

    run_dir = Path(args.run_dir)
    config = saved_run_config(run_dir)
    recipes.check_report_option(config, "average_iterates", "nash-jax average")
    report_path = run_dir / "report.json"
    if not report_path.is_file():
        raise FileNotFoundError(f"{report_path} does not exist; run `nash-jax report {run_dir}` first "
                                "(the average reads the run's iterates from its report)")
    dirs = json.loads(report_path.read_text()).get("iterate_dirs")
    if not dirs:
        raise ValueError(f"{report_path} lists no iterate_dirs (written by an older version); rerun "
                         f"`nash-jax report {run_dir}`")
    chosen = args.iterates or list(dirs)[1:]
    paths = []
    for name in chosen:
        if name in dirs:
            paths.append(dirs[name])
        elif (Path(name) / "config.json").is_file():
            paths.append(name)
        else:
            raise ValueError(f"--iterates {name}: not an iterate of {run_dir}; expected one of "
                             f"{list(dirs)} or a model directory (config.json + safetensors)")
    labels = [Path(n).name if n not in dirs else n for n in chosen]
    out = Path(args.out) if args.out else run_dir / "average" / "-".join(labels)
    check_output(out, "--out", overwrite=args.overwrite)  # before any model is loaded
    mesh = components.make_mesh(config, {})
    run = RunDir(run_dir)
    run.acquire()  # it writes into the run directory: not beside a live run
    try:
        average_policies(paths, out, mesh=mesh, dtype=config.model.dtype, in_run=not args.out,
                         param_dtype=config.model.param_dtype,
                         tokenizer_dir=components.tokenizer_source(config, run_dir))
    finally:
        run.close()
    print(f"average of {', '.join(labels)} written to {out}")


def _import_gguf(args):
    import tempfile

    from nash_jax.models.gguf import import_gguf
    from nash_jax.models.packaged import gguf_file

    with tempfile.TemporaryDirectory() as scratch:  # where a packaged checkpoint is assembled
        result = import_gguf(gguf_file(args.file, scratch), args.out_dir, dtype=args.dtype,
                             overwrite=args.overwrite)
    print(result.summary())


def _print_report_summary(config, report, run_dir):
    from nash_jax import recipes

    for line in recipes.summary_lines(config, report):
        print(line)
    print(f"report: {Path(run_dir) / 'report.md'}")


def read_judge_requests(path):
    """JSONL lines {"prompt": str, "candidates": [str, ...]} -> (prompts, candidate lists)."""
    from nash_jax.files import reading_text

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prompts file {path} does not exist")
    with reading_text(path):
        lines = path.read_text().splitlines()
    prompts, candidates = [], []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{n}: not valid JSON: {err}") from None
        if (not isinstance(row, dict) or not isinstance(row.get("prompt"), str)
                or not isinstance(row.get("candidates"), list)
                or not all(isinstance(c, str) for c in row["candidates"])):
            raise ValueError(f"{path}:{n}: expected {{\"prompt\": str, \"candidates\": [str, ...]}}")
        prompts.append(row["prompt"])
        candidates.append(row["candidates"])
    if not prompts:
        raise ValueError(f"{path}: no requests")
    return prompts, candidates


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number; got {text}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive finite number; got {text}")
    return value


def _int_in(low, high=None):
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


_positive_int = _int_in(1)
MAX_GAME_STEPS = 100_000  # `nash-jax game` keeps (and --json prints) one exploitability per step
MAX_BEST_OF_N = 64  # `nash-jax rerank` samples n per held-out sample and judges n × n pairs of them


def _add_process_flags(parser):
    group = parser.add_argument_group(
        "several processes (one per host; or several on one machine, with gloo on CPU)",
        "every process runs the same command; process 0 writes the run directory, which must be on "
        "a file system that all of them see")
    group.add_argument("--coordinator", metavar="HOST:PORT", help="address of process 0")
    group.add_argument("--num-processes", type=_positive_int, default=1)
    group.add_argument("--process-id", type=int, default=0)


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
    game.add_argument("--steps", type=_int_in(1, MAX_GAME_STEPS), default=1000,
                      help=f"MWU and Nash-MD steps, 1 to {MAX_GAME_STEPS} (default 1000)")
    game.add_argument("--beta", type=_positive_float, default=0.1,
                      help="KL weight of the RLHF optimum (default 0.1)")
    game.add_argument("--tau", type=_positive_float, nargs="+", default=[0.1, 0.02],
                      help="Nash-MD regularisation strengths (default 0.1 0.02)")
    game.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    game.add_argument("--plot", metavar="PNG", help="draw exploitability against step into PNG (a new "
                                                    "file)")
    game.add_argument("--overwrite", action="store_true",
                      help="let --plot replace a PNG that this command drew before (never another file)")
    game.set_defaults(handler=_game)

    judge = commands.add_parser(
        "judge", help="K×K preference matrices from any judge (PairRM by default), as JSON lines",
        description="Judge every ordered pair of candidates of each prompt and print one JSON line per "
                    "prompt: its K×K matrix P[i][j] = P(candidate i ≻ candidate j), the win rates (row "
                    "means) and the judge's per-prompt figures (the LLM judge's position_inconsistency). "
                    "The judge is PairRM at --model unless KEY=VALUE settings of the config's `judge` "
                    "section say otherwise: kind=llm path=DIR, kind=reward_model path=DIR, kind=python "
                    "function=package.module:name returns=rewards, kind=file path=FILE.")
    judge.add_argument("--model", help="the judge's directory or file (judge.path; PairRM: config.json, "
                                       "weights, tokenizer)")
    judge.add_argument("--prompts", required=True,
                       help='JSONL file of {"prompt": ..., "candidates": [...]} lines')
    judge.add_argument("--mode", choices=["pairwise", "blender"], default="pairwise",
                       help="PairRM: pairwise: σ((s(i,j) − s(j,i))/2) (default); blender: the official "
                            "SPPO pipeline's σ(score_i − score_j)")
    judge.add_argument("--batch-size", type=_positive_int, default=16,
                       help="rows per device call (PairRM encoder rows, LLM judge pairs, reward-model "
                            "responses)")
    judge.add_argument("settings", nargs="*", metavar="KEY=VALUE",
                       help="fields of the judge section (kind=llm, template=..., labels=[A,B], "
                            "max_tokens=N, dtype=bfloat16, function=..., returns=..., prompts_per_call=N: "
                            "prompts per judge call)")
    judge.set_defaults(handler=_judge)

    run = commands.add_parser(
        "run", help="run (or resume) a recipe from a YAML config (sppo, nash_md, or a registered one)",
        description="Run the recipe a YAML config names, in RUN_DIR (run_dir=PATH; default "
                    "runs/<config name>-<timestamp>). Rerunning the same command on the same run "
                    "directory resumes it from the last finished stage or checkpoint.")
    run.add_argument("config", help="YAML config (see configs/)")
    run.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                     help="override any config field, dotted for nested ones (train.batch_size=32)")
    _add_process_flags(run)
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
    _add_process_flags(report)
    report.set_defaults(handler=_report)

    rerank = commands.add_parser(
        "rerank", help="add the last iterate reranked best-of-n by the training judge to a run's report",
        description="Sample n responses per held-out prompt from the run's last iterate, keep the one "
                    "with the highest win rate among them under the training judge, and evaluate it "
                    "like an iterate (the report's eval.best_of_n). Reranking with the judge the policy "
                    "was trained against compounds judge exploitation; the report labels it so. "
                    "eval.rerank_judge={kind: ..., ...} reranks with another judge instead.")
    rerank.add_argument("run_dir", help="a run directory (holds config.yaml)")
    rerank.add_argument("--n", type=_int_in(2, MAX_BEST_OF_N), default=16,
                        help=f"candidates per sample, 2 to {MAX_BEST_OF_N} (default 16)")
    rerank.add_argument("overrides", nargs="*", metavar="eval.KEY=VALUE",
                        help="report-only eval fields, e.g. eval.rerank_judge={kind: pairrm, path: DIR}")
    _add_process_flags(rerank)
    rerank.set_defaults(handler=_rerank)

    average = commands.add_parser(
        "average", help="write the parameter average of a run's iterates as a Hugging Face directory",
        description="Average the parameters of chosen iterates of a run (labels from its report, "
                    "default all after pi_0, or model directories) and write the result as an HF "
                    "directory. `eval.average_iterates: true` adds the average to the report instead.")
    average.add_argument("run_dir", help="a run directory with a report (report.json)")
    average.add_argument("--iterates", nargs="+", metavar="LABEL",
                         help="iterates to average: labels such as pi_1 pi_2, or model directories")
    average.add_argument("--out", metavar="DIR", help="output directory, new or empty (default "
                                                      "RUN_DIR/average/<labels>)")
    average.add_argument("--overwrite", action="store_true",
                         help="let --out replace a directory that nash_jax wrote before (one holding "
                              "its .nash-jax marker; never another directory or a file)")
    average.set_defaults(handler=_average)

    plan = commands.add_parser(
        "plan", help="whether a config's training step fits its devices, before loading anything",
        description="From the config alone (model shapes from config.json or --shape, the train "
                    "state built abstractly and sharded on the config's mesh), print per device the "
                    "parameter, optimiser, gradient and activation bytes and, when this machine has "
                    "the mesh's devices, the compiled step's memory analysis; exit non-zero naming "
                    "what does not fit the device memory.")
    plan.add_argument("config", help="YAML config (see configs/)")
    plan.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="override config fields")
    plan.add_argument("--device-memory", metavar="SIZE",
                      help="memory of one device, e.g. 80GiB or 141GB (default: mesh.device_memory, "
                           "else what the device reports)")
    plan.add_argument("--devices", type=_positive_int,
                      help="devices the mesh spans (default: this machine's)")
    plan.add_argument("--shape", help="a known model's shape when model.path is not on this machine: "
                                      "llama3_8b, mistral_7b, llama3.2_1b")
    plan.add_argument("--no-compile", action="store_true",
                      help="analytic figures only (skip lowering and compiling the step)")
    plan.add_argument("--json", action="store_true", help="print one JSON line instead of a table")
    plan.set_defaults(handler=_plan)

    import_gguf = commands.add_parser(
        "import-gguf", help="convert a GGUF file (llama.cpp) into a Hugging Face model directory",
        description="Dequantise every tensor of a GGUF file and write OUT_DIR: config.json, "
                    "safetensors, tokenizer.json with the chat template, generation_config.json. "
                    "Architectures: llama (Llama, Mistral, SmolLM), qwen2, qwen3, gemma2, gemma3. "
                    "Then run with model.path=OUT_DIR.")
    import_gguf.add_argument("file", help="the .gguf file, or package:smollm2 / package:gemma3 (the "
                                          "checkpoints of the packages README's test command installs)")
    import_gguf.add_argument("out_dir", help="output directory (new or empty)")
    import_gguf.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                             help="dtype of the written tensors (default float32)")
    import_gguf.add_argument("--overwrite", action="store_true",
                             help="let OUT_DIR replace a directory that nash_jax wrote before (one "
                                  "holding its .nash-jax marker; never another directory or a file)")
    import_gguf.set_defaults(handler=_import_gguf)
    ssr = commands.add_parser(
        "ssr-validate", help="run the seven SSR consistency checks on one bug artifact, sandboxed",
        description="Check an artifact directory (bug_inject.diff, test_weaken.diff, test_files.txt, "
                    "repository) with pytest in the sandbox; exit 0 when all seven checks pass, 1 "
                    "naming the one that fails, 2 for an artifact that cannot be read.")
    ssr.add_argument("artifact_dir", help="the artifact directory")
    ssr.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ssr.set_defaults(handler=_ssr_validate)
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
