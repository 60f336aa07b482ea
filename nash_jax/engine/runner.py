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
    if config.compilation_cache_dir is not None:  # before anything compiles
        compilation_cache.enable(config.compilation_cache_dir)
    if recipe.check is not None:
        recipe.check(config)
    # every path, before the config is locked into the run directory
    check_paths(config, recipe.builtin_models)
    config = resolve_run_dir(config)
    run_dir = RunDir(config.run_dir)
    try:
        acquire_on_every_process(run_dir)
        run_dir.lock_config(to_dict(config), normalise=config_lib.normalised)
        run_dir.verify()
        return recipe.run(config, run_dir)
    finally:
        run_dir.close()
