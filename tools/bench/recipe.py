"""One SPPO iteration of the demo (configs/demo.yaml) against the same work done the peers' way, on
the same initial policy, prompts and training examples in the same run.

  sppo_iteration_generate: our generate stage (K samples per prompt, written to parquet) against
      transformers generate(do_sample=True, num_return_sequences=K) on the same prompts (the official
      pipeline uses vLLM, which does not run on this CPU).
  sppo_iteration_judge: our judge stage (no peer: the same judge is what both would call).
  sppo_iteration_train: our build + train stages (examples, the jitted SPPO step, orbax checkpoints,
      export) against a PyTorch loop of the official SPPO loss with AdamW, clipping and the config's
      schedule on the same examples, batches (the train stage's shuffle, left-padded as
      nash_jax.rollout.batches.token_batch pads them) and epochs.

Our times are wall times of whole stages from the run's manifest, compilation included (a fresh
process); `steady_time_s` is our generate stage again once compiled and `steady_step_s` our median
step once compiled (step 1 excluded). tools/bench/real_model.py runs the same on SmolLM2.

    python tools/bench/recipe.py
"""

import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import transformers

from common import emit, timings
from nash_jax import data, recipes, runs
from nash_jax.engine import policy_files
from nash_jax.config import load_config
from nash_jax.parallel.padding import left_pad
from nash_jax.rollout.batches import sample_rows, token_batch
from nash_jax.runs import RunDir, read_metrics
from nash_jax.rollout.sampling import eos_ids_of, pad_id_of
from train_step import torch_seq_logp, torch_sppo_loss

ROOT = Path(__file__).resolve().parents[2]


def torch_generate(model, tokenizer, prompt_ids, sampling):
    """transformers generate(do_sample=True, num_return_sequences=K) on the left-padded prompts,
    `sampling.prompts_per_batch` at a time, with the sampling config's K, temperature, top-p, top-k and
    max_new_tokens, stopping at the tokenizer's EOS as our sampler does. Returns each sample's number
    of new tokens, EOS included (as our sampler counts them)."""
    torch.manual_seed(0)
    pad_id, per_batch, lengths = pad_id_of(tokenizer), sampling.prompts_per_batch, []
    for start in range(0, len(prompt_ids), per_batch):
        tokens, segment_ids = left_pad(prompt_ids[start:start + per_batch],
                                       max(map(len, prompt_ids[start:start + per_batch])), pad_id)
        with torch.no_grad():
            out = model.generate(input_ids=torch.as_tensor(tokens, dtype=torch.long),
                           attention_mask=torch.as_tensor(segment_ids, dtype=torch.long),
                           do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p,
                           top_k=sampling.top_k, num_return_sequences=sampling.num_samples,
                           max_new_tokens=sampling.max_new_tokens, eos_token_id=eos_ids_of(tokenizer),
                           pad_token_id=pad_id)
        lengths.extend(new_tokens(out[:, tokens.shape[1]:], eos_ids_of(tokenizer)))
    return lengths


def new_tokens(generated, eos_ids):
    """Per row of generate's new tokens [N, M]: how many it generated, its first EOS included."""
    ended = torch.isin(generated, torch.tensor(eos_ids))
    first = torch.where(ended.any(-1), ended.int().argmax(-1) + 1, generated.shape[1])
    return first.tolist()


TORCH_SCHEDULES = {"constant": lambda opt, warmup, total: transformers.get_constant_schedule_with_warmup(
                       opt, warmup),
                   "linear": transformers.get_linear_schedule_with_warmup,
                   "cosine": transformers.get_cosine_schedule_with_warmup}


def torch_train(model, examples, config, pad_id):
    """The official SPPO loss, ((log π(y) − log π_t(y)) − η (P̂ − 1/2))², with AdamW, global-norm
    clipping and the config's schedule, on the recipe's own batches: the same shuffle (the train
    stage's seed), batch size and epochs, left-padded by nash_jax.rollout.batches.token_batch.
    Returns (steps, first loss)."""
    train = config.train
    rows = [dict(zip(examples, values)) for values in zip(*examples.values())]
    steps = data.num_batches(len(rows), train.batch_size, epochs=train.epochs, drop_remainder=True)
    o = config.train.optimizer  # the recipe's optimiser, b1, b2 and eps included
    if o.name != "adamw":
        raise ValueError(f"train.optimizer.name={o.name!r}; the PyTorch peer runs adamw only")
    opt = torch.optim.AdamW(model.parameters(), lr=o.learning_rate, betas=(o.b1, o.b2), eps=o.eps,
                            weight_decay=o.weight_decay)
    schedule = TORCH_SCHEDULES[o.schedule](opt, math.ceil(o.warmup_ratio * steps), steps)
    losses = []
    for batch in data.batches(rows, train.batch_size, seed=runs.stage_seed(config.seed, 0, "train"),
                              epochs=train.epochs, drop_remainder=True):
        arrays = token_batch([r["prompt_ids"] for r in batch], [r["response_ids"] for r in batch], pad_id)
        logp = torch_seq_logp(model, arrays["tokens"], arrays["loss_mask"], arrays["segment_ids"])
        loss = torch_sppo_loss(logp, torch.tensor([r["anchor_logp"] for r in batch]),
                               torch.tensor([r["win_rate"] for r in batch]), config.sppo.eta)
        loss.backward()
        if o.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), o.clip_norm)
        opt.step()
        schedule.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    return steps, losses[0]


def bench_iteration(config, case):
    """Runs `config` (one iteration, its run_dir set) through its recipe, then the peers on the same
    π_0, prompts and examples; prints {case}_generate, {case}_judge (no peer) and {case}_train."""
    recipes.run(config)
    run_dir = Path(config.run_dir)
    stages = json.loads((run_dir / "manifest.json").read_text())["stages"]
    prompts = runs.read_table(run_dir / "iter_0" / "prompts.parquet")["prompt_ids"]
    examples = runs.read_table(run_dir / "iter_0" / "examples.parquet")
    steps = [m for m in read_metrics(run_dir / "metrics.jsonl") if m["stage"] == "iter_0"]
    policy_dir = policy_files.initial_policy_dir(config.model.path, run_dir)
    s = config.sampling
    counts = dict(prompts=len(prompts), samples=len(prompts) * s.num_samples,
                  examples=len(examples["prompt_ids"]))
    bench_generate(config, stages, policy_dir, prompts, case=f"{case}_generate", **counts)
    emit(case=f"{case}_judge", judge=config.judge.kind, **counts,
         time_s=stages["iter_0/judge"]["seconds"], peer=None, peer_time_s=None, ratio=None,
         fraction_of_peak=None)
    bench_train(config, stages, steps, policy_dir, examples, case=f"{case}_train", **counts)


def bench_generate(config, stages, policy_dir, prompt_ids, case, **counts):
    tokenizer = transformers.AutoTokenizer.from_pretrained(policy_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).eval()
    s = config.sampling
    start = time.perf_counter()
    peer_lengths = torch_generate(model, tokenizer, prompt_ids, s)
    peer_generate = time.perf_counter() - start
    ours = stages["iter_0/generate"]["seconds"]
    # the same stage once compiled: sample_rows again, in this process, on the same policy
    mesh = policy_files.make_mesh(config.mesh, config.train.micro_batches, {})
    policy = policy_files.load_policy(policy_dir, config.model, mesh)
    tokenizer_ours = policy_files.load_policy_tokenizer(config.model, RunDir(config.run_dir))
    # (a freshly loaded policy compiles again: the first call is warm-up, the second is timed)
    _, (steady,) = timings(lambda: sample_rows(
        policy, tokenizer_ours, prompt_ids, num_samples=s.num_samples, sampling=s, mesh=mesh,
        desc="generate", key_of=lambda b: runs.stage_key(config.seed, 0, "generate", b)), repeats=1)
    emit(case=case, **counts, samples_per_prompt=s.num_samples, max_new_tokens=s.max_new_tokens,
         temperature=s.temperature, prompts_per_batch=s.prompts_per_batch,
         mean_new_tokens=round(stages["iter_0/generate"]["info"]["mean_length"], 2),
         peer_mean_new_tokens=round(float(np.mean(peer_lengths)), 2), time_s=ours,
         includes_compile=True, steady_time_s=round(steady, 3),
         steady_ratio=round(peer_generate / steady, 3),
         peer="transformers generate(do_sample=True, num_return_sequences=K)",
         peer_time_s=round(peer_generate, 3), ratio=round(peer_generate / ours, 3),
         fraction_of_peak=None)


def bench_train(config, stages, steps, policy_dir, example_table, case, **counts):
    tokenizer = transformers.AutoTokenizer.from_pretrained(policy_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).train()
    start = time.perf_counter()
    peer_steps, peer_first_loss = torch_train(model, example_table, config, pad_id_of(tokenizer))
    peer_train = time.perf_counter() - start
    ours = stages["iter_0/build"]["seconds"] + stages["iter_0/train"]["seconds"]
    steady_step = statistics.median(m["step_s"] for m in steps[1:]) if len(steps) > 1 else None
    emit(case=case, **counts, batch_size=config.train.batch_size, epochs=config.train.epochs,
         steps=len(steps), peer_steps=peer_steps, time_s=round(ours, 3), includes_compile=True,
         steady_step_s=steady_step and round(steady_step, 4), first_loss=steps[0]["loss"],
         peer_first_loss=round(peer_first_loss, 6),
         peer="torch transformers + AdamW, official SPPO loss", peer_time_s=round(peer_train, 3),
         peer_step_s=round(peer_train / peer_steps, 4), ratio=round(peer_train / ours, 3),
         steady_ratio=steady_step and round(peer_train / peer_steps / steady_step, 3),
         fraction_of_peak=None)


def main():
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(ROOT / "configs" / "demo.yaml",
                             [f"run_dir={Path(tmp) / 'run'}", "sppo.iterations=1"])
        bench_iteration(config, "sppo_iteration")


if __name__ == "__main__":
    main()
