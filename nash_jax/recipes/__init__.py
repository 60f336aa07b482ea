"""Recipes by name. A recipe is one module that registers itself:

    register(Recipe(name="mine", run=run_mine, section="mine", section_type=MineConfig))

after which `recipe: mine` (with a `mine:` config section) runs through `nash-jax run`. The built-in
recipes are listed as entry points of the `nash_jax.recipes` group in pyproject.toml, as an installed
package of your own can list its recipes; a config's `imports:` names further modules to import.

Recipes are the only code that sequences stages and writes runs; everything they use lies below them.
"""

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from nash_jax.runs import compilation_cache
from nash_jax import config as config_lib
from nash_jax.config import to_dict
from nash_jax.runs import RunDir
from nash_jax.recipes import paths


@dataclass(frozen=True)
class Recipe:
    name: str
    run: Callable  # run(config, run_dir: RunDir) -> the report dict; runs (or resumes) every stage
    section: str | None = None  # the recipe's own config section
    section_type: type | None = None  # its dataclass
    check: Callable | None = None  # check(config): relations between fields, before anything starts
    summary: Callable | None = None  # summary(report dict) -> lines `nash-jax run` prints at the end;
    #                                  default: report.summary_lines (the cross-iterate win rates)
    # the built-in models (tasks.registry) whose warm start the recipe makes
    builtin_models: tuple = (config_lib.BUILTIN_SYNTHETIC,)
    plan_step: Callable | None = None  # plan_step(config) -> plan.StepShape of one update (what
    #                                    `nash-jax plan` sizes); default: planning.default_step
    # the report-only eval fields (config.REPORT_ONLY_EVAL_FIELDS) its report reads: `nash-jax rerank`
    # needs best_of_n, `nash-jax average` average_iterates (and the iterate_dirs such a report lists)
    report_options: tuple = config_lib.REPORT_ONLY_EVAL_FIELDS


RECIPES = {}


def register(recipe):
    """Make `recipe` runnable by name; returns it."""
    known = RECIPES.get(recipe.name)
    if known is not None and known.run is not recipe.run:
        raise ValueError(f"a recipe named {recipe.name!r} is already registered (by "
                         f"{known.run.__module__}); choose another name")
    config_lib.register_recipe(recipe.name, recipe.section, recipe.section_type)
    RECIPES[recipe.name] = recipe
    return recipe


def get(name):
    config_lib.discover_recipes()
    if name not in RECIPES:
        raise ValueError(f"recipe {name!r} is not one of {sorted(RECIPES)}")
    return RECIPES[name]


def check_report_option(config, field, what):
    """ValueError unless the report of `config`'s recipe reads eval.`field`; `what` (a command, an
    override) is what does not apply."""
    recipe = get(config.recipe)
    if field not in recipe.report_options:
        others = sorted(name for name, r in RECIPES.items() if field in r.report_options)
        raise ValueError(f"{what} does not apply to a {recipe.name} run (its report reads no "
                         f"eval.{field}); it applies to runs of {others}")


def resolve_run_dir(config, root="runs"):
    """The config with run_dir filled in. Without one, the newest unfinished runs/<name>-<timestamp>
    started with this same config is resumed (so that rerunning a command continues it); otherwise a
    new runs/<name>-<timestamp> is made."""
    if config.run_dir:
        return config
    for path in sorted(Path(root).glob(f"{config.name}-*"), reverse=True):
        candidate = dataclasses.replace(config, run_dir=str(path))
        if (_saved_config(path) == config_lib.normalised(to_dict(candidate))
                and not RunDir(path).done("report")):
            return candidate
    stamp = time.strftime('%Y%m%d-%H%M%S', time.localtime(_process_0_time()))
    return dataclasses.replace(config, run_dir=str(Path(root) / f"{config.name}-{stamp}"))


def _process_0_time():
    """The clock of process 0, so that every process of a run names the same new directory."""
    import jax

    now = int(time.time())
    if jax.process_count() > 1:
        import numpy as np
        from jax.experimental import multihost_utils
        now = int(multihost_utils.broadcast_one_to_all(np.int64(now)))
    return now


def _saved_config(path):
    """The config saved in run directory `path`, as this version reads it, with run_dir set to `path`
    (a moved directory still matches); None if there is none that reads."""
    try:
        saved = config_lib.normalised(yaml.safe_load((path / "config.yaml").read_text()))
    except (OSError, yaml.YAMLError):
        return None
    return saved and {**saved, "run_dir": str(path)}


def _acquire_on_every_process(run_dir):
    """Process 0 takes the run directory's lock; every process learns whether it did (so that none
    goes on alone into the run's collectives)."""
    import jax

    error = None
    try:
        run_dir.acquire()
    except ValueError as err:
        error = err
    if jax.process_count() > 1:
        import numpy as np
        from jax.experimental import multihost_utils
        ok = multihost_utils.broadcast_one_to_all(np.int32(error is None))
        if error is None and not ok:
            error = ValueError(f"process 0 could not take the lock of run directory {run_dir.path}")
    if error is not None:
        raise error


def summary_lines(config, report):
    """What `nash-jax run` prints when the recipe `config` names has finished with `report`."""
    recipe = get(config.recipe)
    if recipe.summary is not None:
        return recipe.summary(report)
    from nash_jax.reporting import summary_lines as default
    return default(report)


def run(config):
    """Run (or resume) the recipe a config names; returns the report dict."""
    recipe = get(config.recipe)
    if config.compilation_cache_dir is not None:  # before anything compiles
        compilation_cache.enable(config.compilation_cache_dir)
    if recipe.check is not None:
        recipe.check(config)
    # every path, before the config is locked into the run directory
    paths.check_paths(config, recipe.builtin_models)
    config = resolve_run_dir(config)
    run_dir = RunDir(config.run_dir)
    try:
        _acquire_on_every_process(run_dir)
        run_dir.lock_config(to_dict(config), normalise=config_lib.normalised)
        run_dir.verify()
        return recipe.run(config, run_dir)
    finally:
        run_dir.close()
