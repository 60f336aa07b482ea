"""Where an SPPO step's time goes, piece by piece: nash_jax against PyTorch + transformers on the same
weights and batch (tools/bench/train_step.py's step), each piece jitted (ours) and timed on its own:

    logprobs          the policy's sequence log-probs, no gradient (the anchor pass)
    trunk_forward     the decoder layers alone (final-normed hidden states), no gradient
    trunk_grad        the layers' forward + backward (the gradient of Σ hidden · r, r fixed)
    head_grad         the log-prob head's forward + backward on fixed hidden states (log-softmax of
                      hidden · Wᵀ over the vocabulary, chunked on our side as the step runs it;
                      gradient to hidden and W)
    head_grad_full    the same from the full [rows, V] logits on our side (train.logprob_chunk=0)
    forward_backward  the SPPO loss and its gradient with respect to every parameter
    update            global-norm clipping + AdamW on the parameter tree, the gradient given
    step              the whole update step (forward, backward, clipping, AdamW)
    matmul_*          single matmuls of the step's shapes (rows = B·(T − 1)): the MLP's up projection,
                      its kernel gradient xᵀ·dy, and the head's logits

One JSON line a piece: our seconds, the peer's, ratio = peer / ours (> 1: ours faster). Each side runs
in its own subprocess, its pieces timed in interleaved rounds (one call of each a round), so that a
burst of load on a shared machine falls on every piece alike. Time it on one core with the process clock for a measurement:

    NASH_JAX_BENCH_CLOCK=process taskset -c 1 python tools/bench/step_profile.py [MODEL_DIR]
        [--batch 16] [--length 128] [--repeats 3] [--only PIECE ...]

Without MODEL_DIR it builds train_step.py's random ~25M Llama (then --batch 8 --length 256 match it).
"""

import argparse
import json
from functools import partial
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from common import emit, interleaved_timings
from train_step import ETA, LR, make_batch, torch_sppo

PIECES = ("logprobs", "trunk_forward", "trunk_grad", "head_grad", "head_grad_full", "forward_backward",
          "update", "step", "matmul_mlp", "matmul_mlp_kernel_grad", "matmul_head")


def jax_setup(model_dir, batch):
    """(model_def, state, step, placed batch, the model's config) of train_step.py's SPPO step."""
    import jax

    from nash_jax import parallel
    from nash_jax.models import load_pretrained
    from nash_jax.config import OptimizerConfig
    from nash_jax.train import init_train_state, make_logprobs, make_optimizer
    from nash_jax.train import make_step

    mesh = parallel.make_mesh(devices=jax.devices()[:1])
    tx, schedule = make_optimizer(OptimizerConfig(name="adamw", learning_rate=LR, schedule="constant",
                                                  warmup_ratio=0.0, clip_norm=1.0), 1000)
    model = load_pretrained(model_dir)
    config = model.config
    model_def, state, shardings = init_train_state(model, tx, mesh=mesh)
    batch["anchor_logp"] = np.asarray(make_logprobs(model_def, mesh)(state.params, batch))
    step = make_step("sppo", model_def, tx, schedule, shardings, mesh, eta=ETA)
    return model_def, state, step, tx, step.place(batch), config


def matmul_calls(rows, hidden, inner, vocab, framework):
    """{piece: call} of the three single matmuls, in `framework` ("jax" or "torch")."""
    rng = np.random.default_rng(0)
    x, dy = (rng.standard_normal(s, np.float32) for s in ((rows, hidden), (rows, inner)))
    w, head = (rng.standard_normal(s, np.float32) for s in ((hidden, inner), (vocab, hidden)))
    if framework == "torch":
        import torch

        x, dy, w, head = map(torch.from_numpy, (x, dy, w, head))
        x_t = x.T.contiguous()
        return {"matmul_mlp": lambda: x @ w, "matmul_mlp_kernel_grad": lambda: x_t @ dy,
                "matmul_head": lambda: x @ head.T}
    import jax
    import jax.numpy as jnp

    x, dy, w, head = map(jnp.asarray, (x, dy, w, head))
    x_t = jnp.asarray(np.asarray(x).T)
    mm = jax.jit(jnp.matmul)
    logits = jax.jit(lambda h, v: jnp.einsum("ne,ve->nv", h, v))
    return {"matmul_mlp": lambda: jax.block_until_ready(mm(x, w)),
            "matmul_mlp_kernel_grad": lambda: jax.block_until_ready(mm(x_t, dy)),
            "matmul_head": lambda: jax.block_until_ready(logits(x, head))}


def jax_model_calls(model_def, state, placed, chunk):
    """{piece: call} of the model's pieces (the log-probs, the trunk, the head), jitted."""
    import jax
    import jax.numpy as jnp

    from nash_jax.core import losses
    from nash_jax.train.steps import TOKEN_FIELDS, policy_logprobs

    params = jax.tree.map(jnp.copy, state.params)  # its own: the step donates the state's
    fields = [placed[f] for f in TOKEN_FIELDS]
    tokens, segment_ids, loss_mask = fields

    def hidden_of(p):
        model = model_def.merge(p)
        return model.hidden_states(tokens[:, :-1], segment_ids=segment_ids[:, :-1])[0]

    hidden = jax.jit(hidden_of)(params)
    r = jax.random.normal(jax.random.key(0), hidden.shape, hidden.dtype)
    head = model_def.merge(params).unembedding()

    def head_loss(h, w, chunk=chunk):
        if not chunk:
            logits = losses.logits_from_hidden(h, w)
            return jnp.sum(losses.token_logprobs(logits, tokens[:, 1:], loss_mask[:, 1:]))
        logp = losses.chunked_token_logprobs(h, w, tokens[:, 1:], loss_mask[:, 1:], chunk=chunk)
        return jnp.sum(logp)

    def sppo(p):
        logp = policy_logprobs(model_def, p, *fields, logprob_chunk=chunk)
        return jnp.mean((logp - placed["anchor_logp"] - ETA * (placed["win_rate"] - 0.5)) ** 2)

    fns = {"logprobs": (jax.jit(lambda p: policy_logprobs(model_def, p, *fields,
                                                           logprob_chunk=chunk)), (params,)),
           "trunk_forward": (jax.jit(hidden_of), (params,)),
           "trunk_grad": (jax.jit(jax.value_and_grad(lambda p: jnp.sum(hidden_of(p) * r))), (params,)),
           "head_grad": (jax.jit(jax.value_and_grad(head_loss, argnums=(0, 1))), (hidden, head)),
           "head_grad_full": (jax.jit(jax.value_and_grad(partial(head_loss, chunk=0),
                                                         argnums=(0, 1))), (hidden, head)),
           "forward_backward": (jax.jit(jax.value_and_grad(sppo)), (params,))}
    return {name: (lambda f=f, a=a: jax.block_until_ready(f(*a))) for name, (f, a) in fns.items()}


def jax_pieces(model_dir, batch, repeats, only):
    import jax
    import optax

    from nash_jax.train.steps import DEFAULT_LOGPROB_CHUNK

    model_def, state, step, tx, placed, c = jax_setup(model_dir, batch)
    rows = placed["tokens"].shape[0] * (placed["tokens"].shape[1] - 1)
    calls = {**jax_model_calls(model_def, state, placed, DEFAULT_LOGPROB_CHUNK),
             **matmul_calls(rows, c.hidden_size, c.intermediate_size, c.vocab_size, "jax")}
    grads = jax.tree.map(lambda p: 1e-3 * p, state.params)

    @partial(jax.jit, donate_argnums=(0, 1))  # in place, as the step (and torch) update
    def update(params, opt_state):
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    update_state = {"params": jax.tree.map(lambda p: p + 0, state.params),
                    "opt": jax.tree.map(lambda p: p + 0, state.opt_state)}

    def one_update():
        update_state["params"], update_state["opt"] = update(update_state["params"],
                                                              update_state["opt"])
        jax.block_until_ready(update_state["params"])

    holder = {"state": state}

    def one_step():
        holder["state"], metrics = step.jitted(holder["state"], placed)
        jax.block_until_ready(metrics["loss"])

    calls.update(update=one_update, step=one_step)
    return interleaved_timings({name: calls[name] for name in PIECES if name in only}, repeats=repeats)


def torch_model_calls(model, seq_logp, loss, batch):
    """{piece: call} of the model's pieces in PyTorch, as jax_model_calls has them."""
    import torch

    tokens = torch.as_tensor(batch["tokens"])
    mask = torch.as_tensor(batch["loss_mask"])[:, 1:].float()
    with torch.no_grad():
        hidden = model.model(tokens[:, :-1]).last_hidden_state
    r = torch.randn(hidden.shape, generator=torch.Generator().manual_seed(0))
    head = model.lm_head.weight

    def no_grad(fn):
        def call():
            with torch.no_grad():
                fn()
        return call

    def trunk_grad():
        model.zero_grad(set_to_none=True)
        (model.model(tokens[:, :-1]).last_hidden_state * r).sum().backward()

    def head_grad():
        h = hidden.detach().requires_grad_(True)
        head.grad = None
        logits = (h @ head.T).float()
        picked = torch.gather(logits.log_softmax(-1), 2, tokens[:, 1:, None]).squeeze(2)
        (picked * mask).sum().backward()

    def forward_backward():
        model.zero_grad(set_to_none=True)
        loss().backward()

    return {"logprobs": no_grad(seq_logp), "head_grad_full": head_grad,
            "trunk_forward": no_grad(lambda: model.model(tokens[:, :-1])),
            "trunk_grad": trunk_grad, "head_grad": head_grad, "forward_backward": forward_backward}


def torch_pieces(model_dir, batch, repeats, only):
    import torch

    model, opt, seq_logp, loss = torch_sppo(model_dir, batch)
    c = model.config
    rows = batch["tokens"].shape[0] * (batch["tokens"].shape[1] - 1)
    calls = {**torch_model_calls(model, seq_logp, loss, batch),
             **matmul_calls(rows, c.hidden_size, c.intermediate_size, c.vocab_size, "torch")}
    grads = [1e-3 * p.detach().clone() for p in model.parameters()]

    def update():
        for p, g in zip(model.parameters(), grads):
            p.grad = g.clone()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    def one_step():
        opt.zero_grad(set_to_none=True)
        loss().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    calls.update(update=update, step=one_step)
    return interleaved_timings({name: calls[name] for name in PIECES if name in only}, repeats=repeats)


def child(impl, model_dir, b, t, repeats, only):
    vocab = json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"]
    batch = make_batch(b, t, vocab)
    pieces = (jax_pieces if impl == "jax" else torch_pieces)(model_dir, batch, repeats, only)
    print(json.dumps({name: {"first_s": first, "times": times}
                      for name, (first, times) in pieces.items()}))


def run_sides(model_dir, args):
    results = {}
    for impl in ("jax", "torch"):
        command = [sys.executable, __file__, str(model_dir), "--batch", str(args.batch), "--length",
                   str(args.length), "--repeats", str(args.repeats), "--child", impl]
        for name in args.only or ():
            command += ["--only", name]
        out = subprocess.run(command, capture_output=True, text=True, cwd=Path(__file__).parent)
        if out.returncode:
            sys.exit(f"{impl} run failed:\n{out.stderr[-3000:]}")
        results[impl] = json.loads(out.stdout.strip().splitlines()[-1])
    return results


def report(model_name, args, results):
    for name in PIECES:
        if name not in results["jax"]:
            continue
        ours, peer = (float(np.median(results[i][name]["times"])) for i in ("jax", "torch"))
        emit(case=f"sppo_piece_{name}", model=model_name, batch=args.batch, length=args.length,
             time_s=round(ours, 4), compile_s=round(results["jax"][name]["first_s"] - ours, 2),
             peer="torch transformers (same piece)", peer_time_s=round(peer, 4),
             ratio=round(peer / ours, 3))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir", nargs="?")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", action="append", choices=PIECES)
    parser.add_argument("--child", choices=["jax", "torch"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.model_dir, args.batch, args.length, args.repeats,
                     set(args.only or PIECES))
    if args.model_dir:
        return report(Path(args.model_dir).name, args, run_sides(args.model_dir, args))
    import torch
    import transformers
    from model_step import MODEL

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        transformers.LlamaForCausalLM(transformers.LlamaConfig(**MODEL)).save_pretrained(tmp)
        report("llama25m", args, run_sides(tmp, args))


if __name__ == "__main__":
    main()
