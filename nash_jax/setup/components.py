"""The parts a run config names, built: the mesh, the initial policy and its tokenizer, the judge, the
prompt splits. Each takes the config section it reads (model, data, mesh, train.optimizer), never the
whole run config: recipes unpack that. None of it knows a recipe."""

import hashlib
import json
from pathlib import Path

from nash_jax import data, judges, parallel, runs, tasks
from nash_jax.models import hf
from nash_jax.models.tokenizer import load_tokenizer
from nash_jax.tasks import registry as builtin_models
from nash_jax.train import OptimizerConfig


def make_mesh(mesh, micro_batches, batch_sizes):
    """The mesh of a run's `mesh` section, after checking that each of `batch_sizes` ({config key:
    examples per step}) divides into `micro_batches` (train.micro_batches) over it (before any work
    starts)."""
    made = parallel.make_mesh(mesh.data, mesh.fsdp, mesh.tensor)
    shards = parallel.data_shards(made)
    for key, size in batch_sizes.items():
        if size % parallel.batch_multiple(made, micro_batches):
            raise ValueError(f"{key}={size} does not split into train.micro_batches="
                             f"{micro_batches} micro-batches over the mesh's data × fsdp = "
                             f"{shards} devices; expected a multiple of {micro_batches * shards}")
    return made


# ---------------------------------------------------------------------------------------------------
# the policy and its tokenizer

def initial_policy_dir(model_path, run):
    """π_0's HF directory: model.path `model_path`, or a built-in model's warm start in the run."""
    if (warm := builtin_models.initial_dir(model_path, run)) is not None:
        return warm
    path = Path(model_path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model.path={path}: no config.json there; expected a local Hugging "
                                "Face model directory (config.json + safetensors)")
    return path


def tokenizer_source(model, run):
    """Where the policy of the `model` section keeps its tokenizer: model.tokenizer, a built-in
    model's, or the model's own."""
    if model.tokenizer:
        return model.tokenizer
    builtin = builtin_models.get(model.path)
    return builtin.tokenizer_dir if builtin else initial_policy_dir(model.path, run)


def load_policy(path, model, mesh):
    """The policy at `path` on `mesh`, with the dtypes, remat and attention of the `model` section."""
    return hf.load_pretrained(path, mesh=mesh, dtype=model.dtype, param_dtype=model.param_dtype,
                              remat=model.remat, attention=model.attention)


def load_policy_tokenizer(model, run):
    return load_tokenizer(tokenizer_source(model, run))


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

def prompt_splits(prompts, run, *, eval_prompts, seed, blocks=1):
    """The held-out prompts (`eval_prompts` of them: eval.prompts) and `blocks` disjoint training
    blocks of the `prompts` section's set (data.split_prompts). A built-in prompt set
    (tasks.BUILTIN_PROMPTS) is written to RUN_DIR/data/prompts.jsonl first, and read back through
    `datasets` like any other."""
    path = prompts.path
    if path in tasks.BUILTIN_PROMPTS:
        path = run / "data" / "prompts.jsonl"
        if not path.is_file():
            texts = tasks.builtin_prompt_texts(prompts.path, prompts.builtin_prompts, seed)
            runs.write_text_atomically(path, "".join(json.dumps({"prompt": p}) + "\n"
                                                            for p in texts))
        parallel.barrier("built-in prompts")
    texts = data.load_prompt_texts(path, prompts.prompt_column, prompts.split)
    digest = hashlib.sha256(json.dumps(texts).encode()).hexdigest()
    run.check_fingerprint("prompts", digest, source=f"data.path={path}")
    return data.split_prompts(texts, iterations=blocks, eval_prompts=eval_prompts,
                              per_iteration=prompts.prompts_per_iteration,
                              shuffle=prompts.shuffle, seed=seed)


def encode_prompts(prompts, tokenizer, texts, where, too_long=None):
    """data.encode_prompts with the chat template's system prompt, length limit and (unless given)
    policy of the `prompts` section (data)."""
    return data.encode_prompts(tokenizer, texts, max_tokens=prompts.max_prompt_tokens,
                               too_long=too_long or prompts.too_long,
                               system=prompts.system_prompt, where=where)


def optimizer_config(optimizer, total_steps, **overrides):
    """The OptimizerConfig of a run's train.optimizer section `optimizer`."""
    o = optimizer
    return OptimizerConfig(**{**dict(name=o.name, learning_rate=o.learning_rate, schedule=o.schedule,
                                     warmup_ratio=o.warmup_ratio, weight_decay=o.weight_decay,
                                     clip_norm=o.clip_norm), "total_steps": total_steps, **overrides})
