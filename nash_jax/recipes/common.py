"""What both recipes share: the mesh, models and judges a config names, sampling into rows, token batches,
the checkpointed training loop, parquet artifacts, and the synthetic task's warm start.

Every random choice takes a key from `stage_key(seed, iteration, stage, index)`, so a resumed run draws
exactly what an uninterrupted one draws.
"""

import dataclasses
import json
import time
from pathlib import Path

import jax
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from flax import nnx
from tqdm import tqdm

from nash_jax import data, parallel, runs
from nash_jax.config import BUILTIN_SYNTHETIC
from nash_jax.models import hf
from nash_jax.models.llama import Llama, LlamaConfig
from nash_jax.models.tokenizer import load_tokenizer
from nash_jax.padding import bucket_size, left_pad
from nash_jax.sampling import eos_ids_of, generate, pad_id_of
from nash_jax.tasks import synthetic
from nash_jax.train import OptimizerConfig, init_train_state, make_optimizer
from nash_jax.train.steps import make_sft_step

STAGES = {"generate": 1, "train": 2, "eval": 3, "warm_start": 4, "opponent": 5}


def stage_key(seed, iteration, stage, index=0):
    key = jax.random.PRNGKey(seed)
    for part in (iteration, STAGES[stage], index):
        key = jax.random.fold_in(key, part)
    return key


def stage_seed(seed, iteration, stage):
    """An integer seed for host-side shuffles (grain), from the same parts as stage_key."""
    return int(np.random.SeedSequence([seed, iteration, STAGES[stage]]).generate_state(1)[0])


def make_mesh(config):
    """The config's mesh, after checking that its batches divide over it (before any work starts)."""
    mesh = parallel.make_mesh(config.mesh.data, config.mesh.fsdp, config.mesh.tensor)
    shards = parallel.data_shards(mesh)
    sizes = {"train.batch_size": config.train.batch_size}
    if config.recipe == "nash_md":
        sizes = {"nash_md.prompts_per_step": config.nash_md.prompts_per_step}
    for key, size in sizes.items():
        if size % (config.train.micro_batches * shards):
            raise ValueError(f"{key}={size} does not split into train.micro_batches="
                             f"{config.train.micro_batches} micro-batches over the mesh's data × fsdp = "
                             f"{shards} devices; expected a multiple of "
                             f"{config.train.micro_batches * shards}")
    return mesh


def progress(total, desc, unit):
    return tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True, mininterval=1.0, leave=False,
                disable=None)  # None: bars on a terminal, quiet in logs


# ---------------------------------------------------------------------------------------------------
# models, tokenizers, judges

def initial_policy_dir(config, run):
    """π_0's HF directory: the configured model, or the synthetic task's warm-started one."""
    if config.model.path == BUILTIN_SYNTHETIC:
        return run / "init" / "policy"
    path = Path(config.model.path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model.path={path}: no config.json there; expected a local Hugging "
                                "Face model directory (config.json + safetensors)")
    return path


def tokenizer_source(config, run):
    """Where the policy's tokenizer lives: model.tokenizer, the synthetic task's, or the model's own."""
    if config.model.tokenizer:
        return config.model.tokenizer
    return synthetic.TOKENIZER_DIR if config.model.path == BUILTIN_SYNTHETIC \
        else initial_policy_dir(config, run)


def load_policy(path, config, mesh):
    return hf.load_pretrained(path, mesh=mesh, dtype=config.model.dtype,
                              param_dtype=config.model.param_dtype, remat=config.model.remat)


def load_policy_tokenizer(config, run):
    return load_tokenizer(tokenizer_source(config, run))


def prepare(config, run):
    """(mesh, tokenizer, prompt splits, judge) of a run, with the synthetic task's π_0 made first."""
    mesh = make_mesh(config)
    tokenizer = load_policy_tokenizer(config, run)
    splits = prompt_splits(config, run)
    judge = make_judge(config.judge, mesh)
    if config.model.path == BUILTIN_SYNTHETIC:
        warm_start(config, run, tokenizer, mesh)
    return mesh, tokenizer, splits, judge


def make_judge(judge_config, mesh=None):
    """The PreferenceModel a JudgeConfig names."""
    if judge_config.kind == "synthetic":
        return synthetic.SyntheticOracle()
    if judge_config.path is None or not Path(judge_config.path).exists():
        raise FileNotFoundError(f"judge.path={judge_config.path}: does not exist; the {judge_config.kind} "
                                "judge needs a local "
                                + ("PairRM directory" if judge_config.kind == "pairrm" else "file"))
    if judge_config.kind == "pairrm":
        from nash_jax.judges.pairrm import PairRM
        return PairRM.from_pretrained(judge_config.path, mesh=mesh, batch_size=judge_config.batch_size,
                                      mode=judge_config.mode)
    from nash_jax.judges.simple import FileJudge
    return FileJudge(judge_config.path)


def judge_matrices(judge, prompts, candidates, *, per_call, where, bar=None, crash_prefix=None):
    """[B, K, K] from `judge`, asked `per_call` prompts at a time; a bad answer names `where`."""
    out = []
    for start in range(0, len(prompts), per_call):
        try:
            out.append(judge.prob_matrix(prompts[start:start + per_call],
                                         candidates[start:start + per_call]))
        except ValueError as err:
            raise ValueError(f"{where}, prompts {start}-{min(start + per_call, len(prompts)) - 1}: "
                             f"{err}") from None
        if bar is not None:
            bar.update(len(out[-1]))
        if crash_prefix:
            runs.crash_point(f"{crash_prefix}:call={len(out)}")
    return np.concatenate(out)


# ---------------------------------------------------------------------------------------------------
# prompts

def prompt_splits(config, run):
    """The held-out and per-iteration prompt strings (the synthetic task writes its prompts to
    RUN_DIR/data/prompts.jsonl first, and reads them back through `datasets` like any other)."""
    path = config.data.path
    if path == BUILTIN_SYNTHETIC:
        path = run / "data" / "prompts.jsonl"
        if not path.is_file():
            texts = synthetic.prompt_texts(config.data.synthetic_prompts, seed=config.seed)
            runs.write_text_atomically(path, "".join(json.dumps({"prompt": p}) + "\n"
                                                            for p in texts))
        parallel.barrier("synthetic prompts")
    texts = data.load_prompt_texts(path, config.data.prompt_column, config.data.split)
    iterations = config.sppo.iterations if config.recipe == "sppo" else 1
    return data.split_prompts(texts, iterations=iterations, eval_prompts=config.eval.prompts,
                              per_iteration=config.data.prompts_per_iteration,
                              shuffle=config.data.shuffle, seed=config.seed)


def encode_prompts(config, tokenizer, texts, where, too_long=None):
    """data.encode_prompts with the config's template, length limit and (unless given) policy."""
    return data.encode_prompts(tokenizer, texts, max_tokens=config.data.max_prompt_tokens,
                               too_long=too_long or config.data.too_long,
                               system=config.data.system_prompt, where=where)


# ---------------------------------------------------------------------------------------------------
# sampling and token batches

def sample_rows(model, tokenizer, prompt_ids, *, num_samples, sampling, key_of, mesh, desc,
                max_new_tokens=None, crash_prefix=None):
    """Sample `num_samples` responses per prompt (batches of sampling.prompts_per_batch) → dict of
    per-prompt columns: response_ids, responses (text), lengths, logp (Σ log π, untempered), finished."""
    columns = {"response_ids": [], "responses": [], "lengths": [], "logp": [], "finished": []}
    pad_id = pad_id_of(tokenizer)
    per_batch = sampling.prompts_per_batch
    bar = progress(len(prompt_ids), desc, "prompt")
    for index, batch in enumerate(data.batches(prompt_ids, per_batch)):
        samples = generate(model, batch, num_samples=num_samples,
                           max_new_tokens=max_new_tokens or sampling.max_new_tokens,
                           temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                           eos_token_ids=eos_ids_of(tokenizer), key=key_of(index), mesh=mesh,
                           pad_id=pad_id, batch_buckets=[bucket_size(per_batch)])
        for b in range(len(batch)):
            ids = [samples.tokens[b, k, :samples.lengths[b, k]].tolist() for k in range(num_samples)]
            columns["response_ids"].append(ids)
            columns["responses"].append([tokenizer.decode(r, skip_special_tokens=True) for r in ids])
            columns["lengths"].append(samples.lengths[b].tolist())
            columns["logp"].append(samples.logprobs_raw[b].sum(-1).tolist())
            columns["finished"].append(samples.finished[b].tolist())
        bar.update(len(batch))
        if crash_prefix:
            runs.crash_point(f"{crash_prefix}:batch={index + 1}")
    bar.close()
    return columns


def token_batch(prompt_ids, response_ids, pad_id):
    """Left-padded prompt + response rows → tokens, segment_ids, loss_mask [N, T] (T a power of two
    ≥ 8); the loss mask covers the response tokens."""
    rows = [list(p) + list(r) for p, r in zip(prompt_ids, response_ids)]
    width = bucket_size(max(len(r) for r in rows), minimum=8, what="sequence length")
    tokens, segment_ids = left_pad(rows, width, pad_id)
    loss_mask = np.zeros_like(segment_ids, dtype=bool)
    for i, r in enumerate(response_ids):
        if len(r):
            loss_mask[i, width - len(r):] = True
    return {"tokens": tokens, "segment_ids": segment_ids, "loss_mask": loss_mask}


# ---------------------------------------------------------------------------------------------------
# parquet artifacts

def write_table(path, columns):
    table = pa.table(columns)
    runs.write_atomically(path, lambda tmp: pq.write_table(table, tmp))


def read_table(path):
    return pq.read_table(path).to_pydict()


# ---------------------------------------------------------------------------------------------------
# training

def optimizer_config(config, total_steps, **overrides):
    o = config.train.optimizer
    return OptimizerConfig(**{**dict(name=o.name, learning_rate=o.learning_rate, schedule=o.schedule,
                                     warmup_ratio=o.warmup_ratio, weight_decay=o.weight_decay,
                                     clip_norm=o.clip_norm), "total_steps": total_steps, **overrides})


def train_loop(run, stage, model, rows, *, make_step, to_batch, optimizer, batch_size, epochs, seed,
               checkpoint_every, mesh):
    """Train `model` on `rows` (shuffled by `seed`, `epochs` passes, full batches) and return it.

    Orbax checkpoints under RUN_DIR/<stage>/checkpoints every `checkpoint_every` steps hold the train
    state and the grain iterator's state; a rerun continues from the latest and ends with the same
    parameters as an uninterrupted run. Metrics go to metrics.jsonl and TensorBoard.
    """
    total = data.num_batches(len(rows), batch_size, epochs=epochs, drop_remainder=True)
    if total == 0:
        raise ValueError(f"{stage}: {len(rows)} training examples × {epochs} epochs make no full batch "
                         f"of train.batch_size={batch_size}; lower the batch size or add prompts")
    tx, schedule = make_optimizer(dataclasses.replace(optimizer, total_steps=total))
    model_def, state, shardings = init_train_state(model, tx, mesh=mesh, seed=seed)
    step_fn = make_step(model_def, tx, schedule, shardings, mesh)
    batches = iter(data.batches(rows, batch_size, seed=seed, epochs=epochs, drop_remainder=True))
    manager = runs.checkpoint_manager(run / stage / "checkpoints", checkpoint_every)
    start = 0
    restored = runs.restore_checkpoint(manager, {"state": state})
    if restored is not None:
        start, trees, extra = restored
        state = trees["state"]
        batches.set_state(extra["data"])
    bar = progress(total, stage, "step")
    bar.update(start)
    # A step's metrics are fetched after the next step is queued, so that building the next batch on
    # the host overlaps the device's work instead of waiting for it.
    pending, last = None, time.perf_counter()
    for step in range(start, total):
        state, metrics = step_fn.jitted(state, step_fn.place_global(to_batch(next(batches))))
        if pending is not None:
            last = _log_step(run, stage, bar, *pending, last)
        pending = (step + 1, metrics)
        if (step + 1) % checkpoint_every == 0 and step + 1 < total:
            runs.save_checkpoint(manager, step + 1, {"state": state}, {"data": batches.get_state()})
        runs.crash_point(f"{stage}:step={step + 1}")
    if pending is not None:
        _log_step(run, stage, bar, *pending, last)
    bar.close()
    manager.close()
    return model_def.merge(state.params)


def _log_step(run, stage, bar, step, metrics, last):
    """Fetch and log one step's metrics; step_s is the wall time since the previous step's arrived."""
    metrics = jax.device_get(metrics)
    now = time.perf_counter()
    run.log_metrics(stage, step, {**metrics, "step_s": now - last})
    bar.update(1)
    bar.set_postfix(loss=f"{float(metrics['loss']):.4g}")
    return now


def export_policy(model, path, tokenizer_dir):
    """Write `model` as an HF directory at `path` (whole, or not at all). Every process takes part in
    gathering the parameters; process 0 writes."""
    if parallel.is_writer():
        runs.write_dir_atomically(path, lambda tmp: hf.save_pretrained(model, tmp,
                                                                       tokenizer_dir=tokenizer_dir))
    else:
        hf.save_pretrained(model, path, tokenizer_dir=tokenizer_dir)  # gathers; writes nothing
    parallel.barrier(f"export {path}")


# ---------------------------------------------------------------------------------------------------
# the synthetic task's initial policy

def warm_start(config, run, tokenizer, mesh):
    """Fit a tiny Llama to the synthetic task's demonstrations and export it as π_0 (stage `init`)."""
    if run.done("init"):
        return
    w = config.warm_start
    llama = LlamaConfig(vocab_size=len(tokenizer), hidden_size=w.hidden_size,
                        intermediate_size=2 * w.hidden_size, num_layers=w.num_layers, num_heads=4,
                        num_kv_heads=2, head_dim=w.hidden_size // 4)
    model = Llama(llama, rngs=nnx.Rngs(config.seed))
    rng = np.random.default_rng(stage_seed(config.seed, 0, "warm_start"))
    prompts = synthetic.prompt_texts(w.steps * w.batch_size, seed=rng.integers(1 << 31))
    prompt_ids, _, _ = encode_prompts(config, tokenizer, prompts, "warm-start prompts",
                                      too_long="truncate_left")
    eos = tokenizer.eos_token_id
    rows = [{"prompt_ids": p, "response_ids": tokenizer(synthetic.demonstration(text, rng),
                                                        add_special_tokens=False)["input_ids"] + [eos]}
            for p, text in zip(prompt_ids, prompts)]
    pad_id = pad_id_of(tokenizer)

    def to_batch(batch):
        return token_batch([r["prompt_ids"] for r in batch], [r["response_ids"] for r in batch], pad_id)

    optimizer = OptimizerConfig(name="adamw", learning_rate=w.learning_rate, schedule="cosine",
                                warmup_ratio=0.05, clip_norm=1.0)
    model = train_loop(run, "init", model, rows, make_step=make_sft_step, to_batch=to_batch,
                       optimizer=optimizer, batch_size=w.batch_size, epochs=1,
                       seed=stage_seed(config.seed, 0, "warm_start"),
                       checkpoint_every=config.train.checkpoint_every, mesh=mesh)
    export_policy(model, run / "init" / "policy", synthetic.TOKENIZER_DIR)
    run.finish("init", ["init/policy"], examples=len(rows))
