"""Where an SPPO step's time goes: the step of tools/bench/train_step.py split into phases, nash_jax
against PyTorch + transformers on the same weights and batch, each phase timed on its own:

    logprobs         the policy's sequence log-probs, no gradient (the anchor pass)
    forward_backward the SPPO loss and its gradient with respect to every parameter
    step             the whole update (forward, backward, global-norm clipping, AdamW)

so that `step − forward_backward` is the optimiser's share. One JSON line a phase, with the ratio
(peer seconds / ours). Each implementation runs in its own subprocess.

    python tools/bench/step_phases.py MODEL_DIR [--batch 16] [--length 128] [--repeats 3]
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from common import emit, timings
from train_step import ETA, LR, make_batch, torch_sppo

PHASES = ("logprobs", "forward_backward", "step")


def jax_phases(model_dir, batch, repeats):
    import jax
    import jax.numpy as jnp

    from nash_jax import parallel
    from nash_jax.models import load_pretrained
    from nash_jax.config import OptimizerConfig
    from nash_jax.train import init_train_state, make_logprobs, make_optimizer
    from nash_jax.train import make_step
    from nash_jax.train.steps import TOKEN_FIELDS, policy_logprobs

    mesh = parallel.make_mesh(devices=jax.devices()[:1])
    tx, schedule = make_optimizer(OptimizerConfig(name="adamw", learning_rate=LR, schedule="constant",
                                                  warmup_ratio=0.0, clip_norm=1.0), 1000)
    model_def, state, shardings = init_train_state(load_pretrained(model_dir), tx, mesh=mesh)
    logprobs = make_logprobs(model_def, mesh)
    batch["anchor_logp"] = np.asarray(logprobs(state.params, batch))
    step = make_step("sppo", model_def, tx, schedule, shardings, mesh, eta=ETA)
    placed = step.place(batch)

    def loss(params):
        logp = policy_logprobs(model_def, params, *(placed[f] for f in TOKEN_FIELDS))
        return jnp.mean((logp - placed["anchor_logp"] - ETA * (placed["win_rate"] - 0.5)) ** 2)

    gradient = jax.jit(jax.value_and_grad(loss))
    holder = {"state": state}

    def one_step():
        holder["state"], metrics = step.jitted(holder["state"], placed)
        jax.block_until_ready(metrics["loss"])

    calls = {"logprobs": lambda: jax.block_until_ready(logprobs(state.params, batch)),
             "forward_backward": lambda: jax.block_until_ready(gradient(state.params)),
             "step": one_step}
    return {name: timings(call, repeats=repeats) for name, call in calls.items()}


def torch_phases(model_dir, batch, repeats):
    import torch

    model, opt, seq_logp, loss = torch_sppo(model_dir, batch)

    def no_grad_logprobs():
        with torch.no_grad():
            seq_logp()

    def forward_backward():
        model.zero_grad(set_to_none=True)
        loss().backward()

    def one_step():
        forward_backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    calls = {"logprobs": no_grad_logprobs, "forward_backward": forward_backward, "step": one_step}
    return {name: timings(call, repeats=repeats) for name, call in calls.items()}


def child(impl, model_dir, b, t, vocab, repeats):
    batch = make_batch(b, t, vocab)
    phases = (jax_phases if impl == "jax" else torch_phases)(model_dir, batch, repeats)
    print(json.dumps({name: {"first_s": first, "times": times}
                      for name, (first, times) in phases.items()}))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=["jax", "torch"])
    args = parser.parse_args()
    vocab = json.loads((Path(args.model_dir) / "config.json").read_text())["vocab_size"]
    if args.child:
        return child(args.child, args.model_dir, args.batch, args.length, vocab, args.repeats)
    results = {}
    for impl in ("jax", "torch"):
        out = subprocess.run([sys.executable, __file__, args.model_dir, "--batch", str(args.batch),
                              "--length", str(args.length), "--repeats", str(args.repeats),
                              "--child", impl], capture_output=True, text=True,
                             cwd=Path(__file__).parent)
        if out.returncode:
            sys.exit(f"{impl} run failed:\n{out.stderr[-3000:]}")
        results[impl] = json.loads(out.stdout.strip().splitlines()[-1])
    for name in PHASES:
        ours, peer = (float(np.median(results[i][name]["times"])) for i in ("jax", "torch"))
        emit(case=f"sppo_{name}", model=Path(args.model_dir).name, batch=args.batch,
             length=args.length, time_s=round(ours, 4),
             compile_s=round(results["jax"][name]["first_s"] - ours, 2),
             peer="torch transformers (same phase)", peer_time_s=round(peer, 4),
             ratio=round(peer / ours, 3), fraction_of_peak=None)


if __name__ == "__main__":
    main()
