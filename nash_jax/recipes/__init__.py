"""Recipes: the only code that sequences stages and writes runs (see recipes/sppo.py, recipes/nash_md.py)."""

import dataclasses
import time
from pathlib import Path

import yaml

from nash_jax.config import to_dict
from nash_jax.runs import RunDir


def resolve_run_dir(config, root="runs"):
    """The config with run_dir filled in. Without one, the newest unfinished runs/<name>-<timestamp>
    started with this same config is resumed (so that rerunning a command continues it); otherwise a
    new runs/<name>-<timestamp> is made."""
    if config.run_dir:
        return config
    for path in sorted(Path(root).glob(f"{config.name}-*"), reverse=True):
        candidate = dataclasses.replace(config, run_dir=str(path))
        saved = path / "config.yaml"
        if (saved.is_file() and yaml.safe_load(saved.read_text()) == to_dict(candidate)
                and not RunDir(path).done("report")):
            return candidate
    return dataclasses.replace(config, run_dir=str(Path(root) / f"{config.name}-"
                                                   f"{time.strftime('%Y%m%d-%H%M%S')}"))


def run(config):
    """Run (or resume) the recipe a config names; returns the report dict."""
    config = resolve_run_dir(config)
    run_dir = RunDir(config.run_dir)
    run_dir.lock_config(to_dict(config))
    try:
        if config.recipe == "sppo":
            from nash_jax.recipes.sppo import run_sppo
            return run_sppo(config, run_dir)
        from nash_jax.recipes.nash_md import run_nash_md
        return run_nash_md(config, run_dir)
    finally:
        run_dir.close()
