"""`nash-jax average` and `import-gguf`: model directories written from a run's iterates or a GGUF file."""

import json
from pathlib import Path

from nash_jax.cli.runs import saved_run_config


def _average(args):
    from nash_jax import engine
    from nash_jax.engine import policy_files
    from nash_jax.runs.files import check_output
    from nash_jax.evaluation.iterate_averaging import average_policies
    from nash_jax.runs import RunDir

    run_dir = Path(args.run_dir)
    config = saved_run_config(run_dir)
    engine.check_report_option(config, "average_iterates", "nash-jax average")
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
    mesh = policy_files.make_mesh(config.mesh, config.train.micro_batches, {})
    run = RunDir(run_dir)
    run.acquire()  # it writes into the run directory: not beside a live run
    try:
        average_policies(paths, out, mesh=mesh, dtype=config.model.dtype, in_run=not args.out,
                         param_dtype=config.model.param_dtype,
                         tokenizer_dir=policy_files.tokenizer_source(config.model, run_dir))
    finally:
        run.close()
    print(f"average of {', '.join(labels)} written to {out}")


def _import_gguf(args):
    from nash_jax.models.packaged import check_gguf_source, gguf_file
    from nash_jax.runs.files import check_output, scratch_beside

    # the arguments first, in a second: the import below loads JAX and transformers
    check_output(Path(args.out_dir), "OUT_DIR", overwrite=args.overwrite)
    check_gguf_source(args.file)
    from nash_jax.models.gguf import import_gguf

    # a packaged checkpoint is assembled beside OUT_DIR, as a temporary a rerun removes after a kill
    with scratch_beside(args.out_dir) as scratch:
        result = import_gguf(gguf_file(args.file, scratch), args.out_dir, dtype=args.dtype,
                             overwrite=args.overwrite)
    print(result.summary())


def add(commands):
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
