"""One SPPO iteration of the demo (configs/demo.yaml) against the same work done the peers' way, on
the same initial policy, prompts and training examples in the same run.

  sppo_iteration_generate: our generate stage (K samples per prompt, written to parquet) against
      transformers generate(do_sample=True, num_return_sequences=K) on the same prompts (the official
      pipeline uses vLLM, which does not run on this CPU).
  sppo_iteration_train: our train stage (the jitted SPPO step, orbax checkpoints, export) against a
      PyTorch loop of the official SPPO loss with AdamW on the same examples, batch and epochs.

Our times are wall times of whole stages from the run's manifest, compilation included (a fresh
process); `steady_step_s` is our median step once compiled.

    python tools/bench/recipe.py
"""

import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import transformers

from common import emit
from nash_jax import recipes
from nash_jax.config import load_config
from nash_jax import components, runs
from nash_jax.rollouts import sample_rows
from nash_jax.runs import RunDir, read_metrics

ROOT = Path(__file__).resolve().parents[2]


def torch_generate(model, tokenizer, prompt_ids, k, max_new_tokens, per_batch):
    torch.manual_seed(0)
    for start in range(0, len(prompt_ids), per_batch):
        rows = prompt_ids[start:start + per_batch]
        width = max(len(r) for r in rows)
        ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(r)) + r for r in rows])
        mask = (torch.arange(width)[None] >= torch.tensor([width - len(r) for r in rows])[:, None])
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=mask.long(), do_sample=True, top_p=1.0,
                           temperature=1.0, num_return_sequences=k, max_new_tokens=max_new_tokens,
                           eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)


def torch_train(model, examples, config, pad_id):
    """The official SPPO loss, ((log π(y) − log π_t(y)) − η (P̂ − 1/2))², with AdamW and the schedule."""
    n, batch_size, epochs = len(examples["prompt_ids"]), config.train.batch_size, config.train.epochs
    steps = n * epochs // batch_size
    opt = torch.optim.AdamW(model.parameters(), lr=config.train.optimizer.learning_rate, weight_decay=0.0)
    schedule = transformers.get_linear_schedule_with_warmup(
        opt, int(np.ceil(config.train.optimizer.warmup_ratio * steps)), steps)
    order = np.concatenate([np.random.default_rng(e).permutation(n) for e in range(epochs)])
    for step in range(steps):
        idx = order[step * batch_size:(step + 1) * batch_size]
        rows = [examples["prompt_ids"][i] + examples["response_ids"][i] for i in idx]
        width = max(len(r) for r in rows)
        ids = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        loss_mask = torch.zeros_like(ids, dtype=torch.bool)
        for j, i in enumerate(idx):
            p, r = len(examples["prompt_ids"][i]), len(examples["response_ids"][i])
            loss_mask[j, p:p + r] = True
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
        token_logp = logits.log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]
        logp = (token_logp * loss_mask[:, 1:]).sum(-1)
        anchor = torch.tensor([examples["anchor_logp"][i] for i in idx])
        win = torch.tensor([examples["win_rate"][i] for i in idx])
        loss = ((logp - anchor - config.sppo.eta * (win - 0.5)) ** 2).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
        opt.zero_grad()
    return steps


def main():
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        config = load_config(ROOT / "configs" / "demo.yaml", [f"run_dir={run_dir}", "sppo.iterations=1"])
        recipes.run(config)
        stages = json.loads((run_dir / "manifest.json").read_text())["stages"]
        prompts = runs.read_table(run_dir / "iter_0" / "prompts.parquet")["prompt_ids"]
        examples = runs.read_table(run_dir / "iter_0" / "examples.parquet")
        steps = [m for m in read_metrics(run_dir / "metrics.jsonl") if m["stage"] == "iter_0"]

        policy_dir = run_dir / "init" / "policy"
        tokenizer = transformers.AutoTokenizer.from_pretrained(policy_dir)
        model = transformers.AutoModelForCausalLM.from_pretrained(policy_dir).eval()
        s = config.sampling
        start = time.perf_counter()
        torch_generate(model, tokenizer, prompts, s.num_samples, s.max_new_tokens, s.prompts_per_batch)
        peer_generate = time.perf_counter() - start
        ours = stages["iter_0/generate"]["seconds"]
        # the same stage once compiled: sample_rows again, in this process, on the same policy
        mesh = components.make_mesh(config, {})
        policy = components.load_policy(policy_dir, config, mesh)
        tokenizer_ours = components.load_policy_tokenizer(config, RunDir(run_dir))
        start = time.perf_counter()
        sample_rows(policy, tokenizer_ours, prompts, num_samples=s.num_samples, sampling=s, mesh=mesh,
                    desc="generate", key_of=lambda b: runs.stage_key(config.seed, 0, "generate", b))
        steady = time.perf_counter() - start
        emit(case="sppo_iteration_generate", prompts=len(prompts), samples_per_prompt=s.num_samples,
             max_new_tokens=s.max_new_tokens, time_s=ours, includes_compile=True,
             steady_time_s=round(steady, 3), steady_ratio=round(peer_generate / steady, 3),
             peer="transformers generate(do_sample=True, num_return_sequences=K)",
             peer_time_s=round(peer_generate, 3), ratio=round(peer_generate / ours, 3),
             fraction_of_peak=None)

        model = transformers.AutoModelForCausalLM.from_pretrained(policy_dir).train()
        start = time.perf_counter()
        peer_steps = torch_train(model, examples, config, tokenizer.pad_token_id)
        peer_train = time.perf_counter() - start
        ours = stages["iter_0/build"]["seconds"] + stages["iter_0/train"]["seconds"]
        emit(case="sppo_iteration_train", examples=len(examples["prompt_ids"]), steps=len(steps),
             peer_steps=peer_steps, time_s=round(ours, 3), includes_compile=True,
             steady_step_s=round(statistics.median(m["step_s"] for m in steps[1:]), 4),
             peer="torch transformers + AdamW, official SPPO loss", peer_time_s=round(peer_train, 3),
             peer_step_s=round(peer_train / peer_steps, 4), ratio=round(peer_train / ours, 3),
             steady_ratio=round(peer_train / peer_steps / statistics.median(
                 m["step_s"] for m in steps[1:]), 3), fraction_of_peak=None)


if __name__ == "__main__":
    main()
