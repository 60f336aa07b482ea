"""Every local path a run config names, and the policy's architecture, checked before a run starts
(before its config is locked into the run directory), each problem named by its config key."""

from pathlib import Path

from nash_jax import judges, tasks
from nash_jax.config import BUILTIN_SYNTHETIC
from nash_jax.engine import policy_files
from nash_jax.models import hf
from nash_jax.models.tokenizer import tokenizer_problem
from nash_jax.tasks import registry as builtin_models


def check_paths(config, recipe_models=(BUILTIN_SYNTHETIC,)):
    """Every local path the config names, and the policy's architecture, checked before anything
    starts (FileNotFoundError or ValueError naming the key, the path and what was expected there).
    `recipe_models`: the built-in models (tasks.registry) the recipe can warm-start."""
    builtin = builtin_models.get(config.model.path)
    model_dir = builtin is None or builtin.name not in recipe_models
    if model_dir:
        check_policy_dir(config, recipe_models)
    if config.model.tokenizer or model_dir:
        key = "model.tokenizer" if config.model.tokenizer else "model.path"
        path = config.model.tokenizer or config.model.path
        if problem := tokenizer_problem(path):
            raise FileNotFoundError(f"{key}={path}: {problem}; expected a local tokenizer directory "
                                    "(set model.tokenizer to one if the model's has none)")
    policy_files.check_adapter(config.model)  # a PEFT adapter to start from, in every recipe
    if tasks.builtin_prompt_set(config.data.path) is None and not Path(config.data.path).exists():
        raise FileNotFoundError(f"data.path={config.data.path}: does not exist; expected a local prompt "
                                f"file or directory, or one of {', '.join(tasks.BUILTIN_PROMPTS)} "
                                "(NAME:N for N prompts)")
    for key, judge in (("judge", config.judge), ("eval.second_judge", config.eval.second_judge),
                       ("eval.rerank_judge", config.eval.rerank_judge)):
        if judge is not None:
            judges.check_judge(judge, key)
    if config.eval.verifier:
        from nash_jax.judges.simple import import_function

        import_function(config.eval.verifier, "eval.verifier")


def check_policy_dir(config, recipe_models):
    """model.path holds a config.json of a supported architecture with consistent sizes."""
    if builtin := builtin_models.get(config.model.path):
        raise ValueError(f"model.path={builtin.name}: a built-in model warm-started on {builtin.fitted_to}, "
                         f"which recipe {config.recipe} does not make; expected "
                         f"{' or '.join(recipe_models)} or a local Hugging Face model directory")
    path = Path(config.model.path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model.path={path}: no config.json there; expected a local Hugging "
                                f"Face model directory (config.json + safetensors) or "
                                f"{' or '.join(recipe_models)}")
    hf.config_from_hf(hf.read_config(path), dtype=config.model.dtype,
                      param_dtype=config.model.param_dtype, source=str(path / "config.json"))


