"""What every recipe runs on: the one registry of recipes, run-directory resolution and locking, the
resumable loop, the online learner that owns the step skeleton, offline fitting, preparation (mesh,
tokenizer, prompts, judge, warm start), the memory plan and the report of iterates. Recipes (in
nash_jax.recipes) supply only what is their own."""

from nash_jax.engine.registry import (RECIPES, Recipe, check_report_option, get, register,
                                      summary_lines)
from nash_jax.engine.run_dirs import resolve_run_dir
from nash_jax.engine.runner import run

__all__ = ["RECIPES", "Recipe", "check_report_option", "get", "register", "resolve_run_dir", "run",
           "summary_lines"]
