"""Sequence log-probs and the SPPO loss, forward and backward, against the PyTorch code the official
SPPO trainer runs (`log_softmax` + `gather`, masked sum), on the same inputs in the same process.

    python tools/bench/bench_losses.py [--batch 8] [--length 512] [--vocab 32000]

Prints one JSON line per case. `ratio` > 1 means nash_jax is faster. These kernels are memory-bound
(a few FLOPs per logit), so `fraction_of_peak` is null.
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import torch

from common import emit, time_call
from nash_jax.core import losses


def torch_sequence_logprobs(logits, targets, mask):
    """The reference: uclaml/SPPO `_get_batch_logps` (log_softmax over the vocabulary, gather)."""
    per_token = torch.gather(logits.log_softmax(-1), 2, targets.unsqueeze(2)).squeeze(2)
    return (per_token * mask).sum(-1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    b, n, v = args.batch, args.length, args.vocab

    rng = np.random.default_rng(0)
    logits_np = rng.normal(0, 2, (b, n, v)).astype(np.float32)
    targets_np = rng.integers(0, v, (b, n))
    mask_np = np.arange(n)[None, :] >= rng.integers(0, n // 2, (b, 1))  # prompts of varying length
    anchor_np = rng.normal(-300, 10, b).astype(np.float32)
    win_np = rng.uniform(size=b).astype(np.float32)
    tokens = int(mask_np.sum())

    logits, targets, mask = jnp.asarray(logits_np), jnp.asarray(targets_np), jnp.asarray(mask_np)
    anchor, win = jnp.asarray(anchor_np), jnp.asarray(win_np)
    t_logits = torch.from_numpy(logits_np)
    t_targets, t_mask = torch.from_numpy(targets_np), torch.from_numpy(mask_np).float()
    t_anchor, t_win = torch.from_numpy(anchor_np), torch.from_numpy(win_np)

    forward = jax.jit(losses.sequence_logprobs)

    @jax.jit
    def loss_and_grad(logits):
        def loss(lg):
            return losses.sppo_loss(losses.sequence_logprobs(lg, targets, mask), anchor, win, 1e3)
        return jax.value_and_grad(loss)(logits)

    def torch_forward():
        with torch.no_grad():
            return torch_sequence_logprobs(t_logits, t_targets, t_mask)

    def torch_loss_and_grad():
        leaf = t_logits.detach().requires_grad_(True)
        logp = torch_sequence_logprobs(leaf, t_targets, t_mask)
        loss = ((logp - t_anchor - 1e3 * (t_win - 0.5)) ** 2).mean()
        loss.backward()
        return loss, leaf.grad

    # Same numbers first, then speed.
    ours_logp, peer_logp = np.asarray(forward(logits, targets, mask)), torch_forward().numpy()
    rel_diff = float(np.max(np.abs(ours_logp - peer_logp) / np.abs(peer_logp)))
    cases = [
        ("sequence_logprobs_forward", lambda: jax.block_until_ready(forward(logits, targets, mask)),
         torch_forward),
        ("sppo_loss_value_and_grad", lambda: jax.block_until_ready(loss_and_grad(logits)),
         torch_loss_and_grad),
    ]
    for case, ours, peer in cases:
        compile_s, ours_s = time_call(ours, repeats=args.repeats)
        _, peer_s = time_call(peer, repeats=args.repeats)
        emit(case=case, shape=[b, n, v], response_tokens=tokens, jax_backend=jax.default_backend(),
             torch_threads=torch.get_num_threads(), time_s=round(ours_s, 5),
             tokens_per_s=round(tokens / ours_s), compile_s=round(compile_s, 3),
             peer="torch (uclaml/SPPO _get_batch_logps)", peer_time_s=round(peer_s, 5),
             ratio=round(peer_s / ours_s, 3), max_rel_diff_vs_peer=rel_diff, fraction_of_peak=None)


if __name__ == "__main__":
    main()
