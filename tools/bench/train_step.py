"""One SPPO update step of a ~25M-parameter Llama (B 8 × T 256): nash_jax against the equivalent
PyTorch step (policy forward+backward, anchor log-probs from the batch, global-norm clipping, AdamW:
what TRL's DPOTrainer computes per step), on the same weights and batch. Each implementation runs in
its own subprocess so that its peak memory (RSS) is its own.

    python tools/bench/train_step.py [--batch 8] [--length 256] [--repeats 3]
"""

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from common import emit

ETA = 1e3
LR = 5e-7


def make_batch(b, t, vocab, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, (b, t))
    loss_mask = np.zeros((b, t), bool)
    loss_mask[:, t // 4:] = True  # a quarter prompt, the rest response
    return {"tokens": tokens, "segment_ids": np.ones((b, t), np.int32), "loss_mask": loss_mask,
            "win_rate": rng.uniform(size=b).astype(np.float32)}


def run_jax(model_dir, batch, repeats):
    import jax

    from common import timings
    from nash_jax import parallel
    from nash_jax.models import load_pretrained
    from nash_jax.config import OptimizerConfig
    from nash_jax.train import init_train_state, make_logprobs, make_optimizer
    from nash_jax.train import make_step

    mesh = parallel.make_mesh(devices=jax.devices()[:1])
    tx, schedule = make_optimizer(OptimizerConfig(name="adamw", learning_rate=LR, schedule="constant",
                                                  warmup_ratio=0.0, clip_norm=1.0), 1000)
    model_def, state, shardings = init_train_state(load_pretrained(model_dir), tx, mesh=mesh)
    batch["anchor_logp"] = np.asarray(make_logprobs(model_def, mesh)(state.params, batch))
    step = make_step("sppo", model_def, tx, schedule, shardings, mesh, eta=ETA)
    placed = step.place(batch)
    holder = {"state": state, "losses": []}

    def one_step():
        holder["state"], metrics = step.jitted(holder["state"], placed)
        holder["losses"].append(float(metrics["loss"]))

    compile_s, times = timings(one_step, repeats=repeats)  # the first call compiles
    return {"loss": holder["losses"][0], "times": times, "compile_s": compile_s}


def torch_seq_logp(model, tokens, loss_mask, segment_ids=None):
    """[B] Σ log π(tokens_t | tokens_<t) over the loss-mask positions, in PyTorch + transformers.
    segment_ids (0 = left padding, as nash_jax.rollout.batches.token_batch makes them) mask the padding and
    number the positions from each row's first token, as nash_jax does."""
    import torch

    tokens = torch.as_tensor(tokens)
    inputs = {}
    if segment_ids is not None:
        attention = torch.as_tensor(segment_ids)[:, :-1] > 0
        inputs = {"attention_mask": attention.long(),
                  "position_ids": (attention.long().cumsum(-1) - 1).clamp(min=0)}
    logits = model(tokens[:, :-1], **inputs).logits
    per_token = torch.gather(logits.float().log_softmax(-1), 2, tokens[:, 1:, None]).squeeze(2)
    return (per_token * torch.as_tensor(loss_mask)[:, 1:].float()).sum(-1)


def torch_sppo_loss(logp, anchor_logp, win_rate, eta):
    """The official SPPO loss, mean(((log π(y) − log π_t(y)) − η (P̂(y) − 1/2))²)."""
    return ((logp - anchor_logp - eta * (win_rate - 0.5)) ** 2).mean()


def torch_sppo(model_dir, batch):
    """(model, AdamW, seq_logp() -> [B] policy log-probs, loss() -> the SPPO loss against the anchor
    log-probs of the batch under the initial weights), in PyTorch + transformers."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0, eps=1e-8)
    win = torch.from_numpy(batch["win_rate"])

    def seq_logp():
        return torch_seq_logp(model, batch["tokens"], batch["loss_mask"])

    with torch.no_grad():
        anchor = seq_logp()

    def loss():
        return torch_sppo_loss(seq_logp(), anchor, win, ETA)

    return model, opt, seq_logp, loss


def run_torch(model_dir, batch, repeats):
    import torch

    from common import timings

    model, opt, _, sppo_loss = torch_sppo(model_dir, batch)
    losses = []

    def one_step():
        opt.zero_grad(set_to_none=True)
        loss = sppo_loss()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))

    first_s, times = timings(one_step, repeats=repeats)
    return {"loss": losses[0], "times": times, "compile_s": first_s,
            "threads": torch.get_num_threads()}


def child(impl, model_dir, b, t, vocab, repeats):
    batch = make_batch(b, t, vocab)
    result = (run_jax if impl == "jax" else run_torch)(model_dir, batch, repeats)
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def run_both(model_dir, b, t, repeats):
    """(ours, peer): each implementation's step on model_dir's weights, in its own subprocess."""
    results = {}
    for impl in ("jax", "torch"):
        out = subprocess.run([sys.executable, __file__, "--batch", str(b), "--length", str(t),
                              "--repeats", str(repeats), "--child", impl, str(model_dir)],
                             capture_output=True, text=True, cwd=Path(__file__).parent)
        if out.returncode:
            sys.exit(f"{impl} run failed:\n{out.stderr[-3000:]}")
        results[impl] = json.loads(out.stdout.strip().splitlines()[-1])
    return results["jax"], results["torch"]


def emit_step(case, config, b, t, ours, peer):
    """One JSON line: tokens/s of both steps, their ratio, and ours against the fp32 matmul peak."""
    from model_step import matmul_peak_flops, step_flops

    peak = matmul_peak_flops()
    ours_s, peer_s = float(np.median(ours["times"])), float(np.median(peer["times"]))
    tokens = b * (t - 1)
    flops = step_flops(config, b, t - 1)
    emit(case=case, batch=b, length=t, tokens_per_s=round(tokens / ours_s, 1),
         time_s=round(ours_s, 4), compile_s=round(ours["compile_s"], 2),
         peak_rss_mib=round(ours["peak_rss_mib"]), peer="torch transformers + AdamW (TRL-style step)",
         peer_tokens_per_s=round(tokens / peer_s, 1), peer_time_s=round(peer_s, 4),
         peer_peak_rss_mib=round(peer["peak_rss_mib"]), ratio=round(peer_s / ours_s, 3),
         achieved_gflop_per_s=round(flops / ours_s / 1e9, 2),
         matmul_peak_gflop_per_s=round(peak / 1e9, 2), fraction_of_peak=round(flops / ours_s / peak, 3),
         first_loss=ours["loss"], peer_first_loss=peer["loss"], torch_threads=peer["threads"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", nargs=2, metavar=("IMPL", "MODEL_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    b, t = args.batch, args.length
    from model_step import MODEL

    if args.child:
        return child(*args.child, b, t, MODEL["vocab_size"], args.repeats)

    import torch
    import transformers

    config = transformers.LlamaConfig(**MODEL)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        transformers.LlamaForCausalLM(config).save_pretrained(tmp)
        ours, peer = run_both(tmp, b, t, args.repeats)
    emit_step("sppo_step_llama25m", config, b, t, ours, peer)


if __name__ == "__main__":
    main()
