"""`nash-jax run`: a config's recipe run (or resumed) in its locked run directory."""

from nash_jax import config as config_lib
from nash_jax.config import to_dict
from nash_jax.engine.paths import check_paths
from nash_jax.engine.registry import get
from nash_jax.engine.run_dirs import acquire_on_every_process, resolve_run_dir
from nash_jax.runs import RunDir, compilation_cache


def run(config):
    """Run (or resume) the recipe a config names; returns the report dict."""
    recipe = get(config.recipe)
    wandb_options = wandb_settings(config.logging)  # before anything is written
    if config.compilation_cache_dir is not None:  # before anything compiles
        compilation_cache.enable(config.compilation_cache_dir)
    if recipe.check is not None:
        recipe.check(config)
    check_warm_start(config, recipe)
    # every path, before the config is locked into the run directory
    check_paths(config, recipe.builtin_models)
    config = resolve_run_dir(config)
    run_dir = RunDir(config.run_dir)
    failed = True
    try:
        acquire_on_every_process(run_dir)
        run_dir.lock_config(to_dict(config), normalise=config_lib.normalised)
        if wandb_options is not None:
            run_dir.enable_wandb(**wandb_options, config=to_dict(config))
        run_dir.verify()
        report = recipe.run(config, run_dir)
        failed = False
        return report
    finally:
        run_dir.close(failed=failed)


def check_warm_start(config, recipe):
    """warm_start.fit_model only where it applies: a model directory, in a recipe with demonstrations."""
    w, builtin = config.warm_start, config.model.path in recipe.builtin_models
    if w.fit_model and builtin:
        raise ValueError(f"warm_start.fit_model=true: model.path={config.model.path} is a built-in model, "
                         "which is always warm-started; leave it unset")
    if w.fit_model and config.model.lora is not None:
        raise ValueError("warm_start.fit_model=true with model.lora: the fit would train every weight of "
                         "model.path, not adapters; fit first without model.lora, then start LoRA from "
                         "that run's init/policy")
    if w.fit_model and not recipe.fits_model_dirs:
        raise ValueError(f"warm_start.fit_model=true: recipe {recipe.name} has no demonstrations to fit a "
                         "model directory on; leave it unset")


def wandb_settings(logging):
    """The W&B settings of a config's `logging` section as plain values for RunDir.enable_wandb, or
    None without a W&B project; a missing wandb package is said here, before the run writes anything."""
    if logging.wandb is None:
        return None
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise ValueError(f"logging.wandb={logging.wandb} needs the wandb package: pip install "
                         "'nash-jax[wandb]'") from None
    return {"project": logging.wandb, "entity": logging.wandb_entity, "mode": logging.wandb_mode,
            "tags": list(logging.wandb_tags)}
