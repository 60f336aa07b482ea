"""`nash-jax plan`: whether a config's training step fits its devices, before loading anything."""

from nash_jax.cli.arguments import positive_int


def plan_command(args):
    from nash_jax import config as config_lib
    from nash_jax.engine import planning
    from nash_jax.engine import plan

    config = config_lib.load_config(args.config, args.overrides)
    memory = (config_lib.parse_bytes(args.device_memory, "--device-memory")
              if args.device_memory else None)
    result = planning.plan(config, shape=args.shape, devices=args.devices, device_memory=memory,
                           compile_step=not args.no_compile)
    print(plan.to_json(result) if args.json else plan.table(result), flush=True)
    problem = plan.shortfall(result)
    if problem:
        raise ValueError(problem)


def add(commands):
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
    plan.add_argument("--devices", type=positive_int,
                      help="devices the mesh spans (default: this machine's)")
    plan.add_argument("--shape", help="a known model's shape when model.path is not on this machine: "
                                      "llama3_8b, mistral_7b, llama3.2_1b")
    plan.add_argument("--no-compile", action="store_true",
                      help="analytic figures only (skip lowering and compiling the step)")
    plan.add_argument("--json", action="store_true", help="print one JSON line instead of a table")
    plan.set_defaults(handler=plan_command)
