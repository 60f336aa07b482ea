"""The parts a run config names, built: the mesh, the initial policy and its tokenizer, the judge, the
prompt splits. Recipes and the report build what they need from here; none of it knows a recipe."""

import hashlib
import json
from pathlib import Path

from nash_jax import data, judges, parallel, runs, tasks
from nash_jax.config import BUILTIN_SYNTHETIC
from nash_jax.models import hf
from nash_jax.models.tokenizer import load_tokenizer, tokenizer_problem
from nash_jax.tasks import builtin_models
from nash_jax.train import OptimizerConfig


def check_paths(config, recipe_models=(BUILTIN_SYNTHETIC,)):
    """Every local path the config names, and the policy's architecture, checked before anything
    starts (FileNotFoundError or ValueError naming the key, the path and what was expected there).
    `recipe_models`: the built-in models (tasks.builtin_models) the recipe can warm-start."""
    model_dir = config.model.path not in recipe_models
    if model_dir:
        check_policy_dir(config, recipe_models)
    if config.model.tokenizer or model_dir:
        key = "model.tokenizer" if config.model.tokenizer else "model.path"
        path = config.model.tokenizer or config.model.path
        if problem := tokenizer_problem(path):
            raise FileNotFoundError(f"{key}={path}: {problem}; expected a local tokenizer directory "
                                    "(set model.tokenizer to one if the model's has none)")
    if config.data.path not in tasks.BUILTIN_PROMPTS and not Path(config.data.path).exists():
        raise FileNotFoundError(f"data.path={config.data.path}: does not exist; expected a local prompt "
                                f"file or directory, or one of {', '.join(tasks.BUILTIN_PROMPTS)}")
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


def make_mesh(config, batch_sizes):
    """The config's mesh, after checking that each of `batch_sizes` ({config key: examples per step})
    divides over it (before any work starts)."""
    mesh = parallel.make_mesh(config.mesh.data, config.mesh.fsdp, config.mesh.tensor)
    shards = parallel.data_shards(mesh)
    for key, size in batch_sizes.items():
        if size % parallel.batch_multiple(mesh, config.train.micro_batches):
            raise ValueError(f"{key}={size} does not split into train.micro_batches="
                             f"{config.train.micro_batches} micro-batches over the mesh's data × fsdp = "
                             f"{shards} devices; expected a multiple of "
                             f"{config.train.micro_batches * shards}")
    return mesh


# ---------------------------------------------------------------------------------------------------
# the policy and its tokenizer

def initial_policy_dir(config, run):
    """π_0's HF directory: the configured model, or a built-in model's warm start in the run."""
    if (warm := builtin_models.initial_dir(config.model.path, run)) is not None:
        return warm
    path = Path(config.model.path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model.path={path}: no config.json there; expected a local Hugging "
                                "Face model directory (config.json + safetensors)")
    return path


def tokenizer_source(config, run):
    """Where the policy's tokenizer lives: model.tokenizer, a built-in model's, or the model's own."""
    if config.model.tokenizer:
        return config.model.tokenizer
    builtin = builtin_models.get(config.model.path)
    return builtin.tokenizer_dir if builtin else initial_policy_dir(config, run)


def load_policy(path, config, mesh):
    return hf.load_pretrained(path, mesh=mesh, dtype=config.model.dtype,
                              param_dtype=config.model.param_dtype, remat=config.model.remat,
                              attention=config.model.attention)


def load_policy_tokenizer(config, run):
    return load_tokenizer(tokenizer_source(config, run))


def export_policy(model, path, tokenizer_dir, *, in_run=True):
    """Write `model` as an HF directory at `path` (whole, or not at all). Every process takes part in
    gathering the parameters; process 0 writes. in_run: `path` is an artifact of the locked run
    directory (files.write_dir_atomically); False for a path the user named."""
    if parallel.is_writer():
        runs.write_dir_atomically(path, lambda tmp: hf.save_pretrained(model, tmp, tokenizer_dir=tokenizer_dir),
                                  in_run=in_run)
    else:
        hf.save_pretrained(model, path, tokenizer_dir=tokenizer_dir)  # gathers; writes nothing
    parallel.barrier(f"export {path}")


# ---------------------------------------------------------------------------------------------------
# judges

def make_judge(judge_config, mesh=None, key="judge"):
    """judges.make_judge (the public builder), looked up here so that tests can replace it."""
    return judges.make_judge(judge_config, mesh, key)


def judge_matrices(judge, prompts, candidates, *, per_call, where, bar=None, crash_prefix=None,
                   notes=None):
    """[B, K, K] from `judge` in chunks of `per_call` prompts, with a progress bar and crash points
    (notes: a dict for the judge's per-prompt figures, see judge_in_chunks)."""
    from nash_jax.judges.base import judge_in_chunks

    def after_call(judged, calls):
        if bar is not None:
            bar.update(judged)
        if crash_prefix:
            runs.crash_point(f"{crash_prefix}:call={calls}")

    return judge_in_chunks(judge, prompts, candidates, per_call=per_call, where=where,
                           after_call=after_call, notes=notes)


# ---------------------------------------------------------------------------------------------------
# prompts

def prompt_splits(config, run, blocks=1):
    """The held-out prompts and `blocks` disjoint training blocks (data.split_prompts). A built-in
    prompt set (tasks.BUILTIN_PROMPTS) is written to RUN_DIR/data/prompts.jsonl first, and read back
    through `datasets` like any other."""
    path = config.data.path
    if path in tasks.BUILTIN_PROMPTS:
        path = run / "data" / "prompts.jsonl"
        if not path.is_file():
            texts = tasks.builtin_prompt_texts(config.data.path, config.data.builtin_prompts, config.seed)
            runs.write_text_atomically(path, "".join(json.dumps({"prompt": p}) + "\n"
                                                            for p in texts))
        parallel.barrier("built-in prompts")
    texts = data.load_prompt_texts(path, config.data.prompt_column, config.data.split)
    digest = hashlib.sha256(json.dumps(texts).encode()).hexdigest()
    run.check_fingerprint("prompts", digest, source=f"data.path={path}")
    return data.split_prompts(texts, iterations=blocks, eval_prompts=config.eval.prompts,
                              per_iteration=config.data.prompts_per_iteration,
                              shuffle=config.data.shuffle, seed=config.seed)


def encode_prompts(config, tokenizer, texts, where, too_long=None):
    """data.encode_prompts with the config's template, length limit and (unless given) policy."""
    return data.encode_prompts(tokenizer, texts, max_tokens=config.data.max_prompt_tokens,
                               too_long=too_long or config.data.too_long,
                               system=config.data.system_prompt, where=where)


def optimizer_config(config, total_steps, **overrides):
    """The OptimizerConfig of a run config's train.optimizer section."""
    o = config.train.optimizer
    return OptimizerConfig(**{**dict(name=o.name, learning_rate=o.learning_rate, schedule=o.schedule,
                                     warmup_ratio=o.warmup_ratio, weight_decay=o.weight_decay,
                                     clip_norm=o.clip_norm), "total_steps": total_steps, **overrides})
