"""Self-play advantages on device against the per-group Python loops of the RL frameworks.

    python tools/bench/advantages.py [--groups 8192] [--group-size 8] [--samples 8]

Cases, jitted (compilation timed apart as compile_s), each against the same computation written the way
the Python frameworks write it, on the same inputs in the same process:

  grpo_group_advantages   64K rollouts in 8K groups      vs verl's compute_grpo_outcome_advantage
                                                            (dict of group id → scores, np mean/std)
  majority_vote           8K questions × 8 answers       vs R-Zero's per-question dict of classes
  rae_sequential          64K rollouts, 6 (game, seat)   vs SPIRAL's EMA object per role, one
                                                            trajectory at a time
  rae_batched             same inputs, A read against the baselines before the batch

Each case first checks that both give the same numbers. `ratio` > 1 means nash_jax is faster. These
are gathers, scatters and scans, not matmuls, so `fraction_of_peak` is null.
"""

import argparse
import functools
import time
from collections import defaultdict

import jax
import jax.numpy as jnp
import numpy as np

from common import emit, time_call
from nash_jax.core import advantages as adv

DECAY = 0.95
EPS = 1e-6


def verl_grpo(scores, index):
    """verl's GRPO outcome advantage: scores grouped in a dict by uid, np mean and unbiased std."""
    id2score = defaultdict(list)
    for i in range(len(scores)):
        id2score[index[i]].append(scores[i])
    id2mean, id2std = {}, {}
    for idx, group in id2score.items():
        if len(group) == 1:
            id2mean[idx], id2std[idx] = 0.0, 1.0
        else:
            values = np.array(group)
            id2mean[idx], id2std[idx] = np.mean(values), np.std(values, ddof=1)
    out = np.empty_like(scores)
    for i in range(len(scores)):
        out[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + EPS)
    return out


def rzero_majority_vote(answer_ids):
    """R-Zero's vote: classes in an insertion-ordered dict, max() keeps the first-seen maximum."""
    labels, counts, shares = [], [], []
    for row in answer_ids.tolist():
        classes = {}
        for answer in row:
            if answer >= 0:
                classes[answer] = classes.get(answer, 0) + 1
        label = max(classes, key=classes.get) if classes else -1
        labels.append(label)
        counts.append(classes.get(label, 0))
        shares.append(counts[-1] / len(row))
    return np.array(labels), np.array(counts), np.array(shares)


class EMA:
    """SPIRAL's running baseline of one role."""

    def __init__(self, decay):
        self.decay, self.value = decay, 0.0

    def get(self):
        return self.value

    def update(self, x):
        self.value = self.decay * self.value + (1 - self.decay) * x


def spiral_rae(rewards, keys, num_keys, batched):
    """SPIRAL's role-conditioned advantage, one trajectory at a time (batched: every baseline read
    before the batch's updates)."""
    emas = [EMA(DECAY) for _ in range(num_keys)]
    rewards, keys = rewards.tolist(), keys.tolist()
    if batched:
        advantages = [r - emas[k].get() for r, k in zip(rewards, keys)]
        for r, k in zip(rewards, keys):
            emas[k].update(r)
    else:
        advantages = []
        for r, k in zip(rewards, keys):
            baseline = emas[k].get()
            emas[k].update(r)
            advantages.append(r - baseline)
    return np.array(advantages), np.array([e.get() for e in emas])


def max_abs_diff(ours, peer):
    return max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
               for a, b in zip(ours, peer))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, default=8192)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8, help="answers per question (majority vote)")
    parser.add_argument("--baselines", type=int, default=6, help="(game, seat) baselines for RAE")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    g, n = args.groups, args.groups * args.group_size
    rng = np.random.default_rng(0)

    scores = rng.integers(0, 2, n).astype(np.float32) * rng.uniform(0.5, 1.0, n).astype(np.float32)
    index = rng.permutation(np.repeat(np.arange(g), args.group_size))  # groups interleaved
    answer_ids = rng.integers(-1, 4, (g, args.samples))
    rae_rewards = rng.choice(np.array([-1.0, 0.0, 1.0], np.float32), n)
    rae_keys = rng.integers(0, args.baselines, n)

    grpo = jax.jit(functools.partial(adv.group_advantages, num_groups=g, mode="grpo", eps=EPS))
    vote = jax.jit(adv.majority_vote)
    rae = {batched: jax.jit(functools.partial(adv.rae_advantages, decay=DECAY,
                                              sequential=not batched))
           for batched in (False, True)}
    d_scores, d_index = jnp.asarray(scores), jnp.asarray(index)
    d_ids, d_rewards, d_keys = jnp.asarray(answer_ids), jnp.asarray(rae_rewards), jnp.asarray(rae_keys)
    b0 = jnp.zeros(args.baselines)

    cases = [
        ("grpo_group_advantages", n, g, "numpy (verl-style per-group loop)",
         lambda: (grpo(d_scores, d_index),), lambda: (verl_grpo(scores, index),)),
        ("majority_vote", g * args.samples, g, "python (R-Zero-style dict of classes per question)",
         lambda: vote(d_ids), lambda: rzero_majority_vote(answer_ids)),
    ] + [
        (f"rae_{'batched' if batched else 'sequential'}", n, args.baselines,
         "python (SPIRAL-style EMA loop over trajectories)",
         functools.partial(lambda f: f(d_rewards, d_keys, b0), rae[batched]),
         functools.partial(spiral_rae, rae_rewards, rae_keys, args.baselines, batched))
        for batched in (False, True)
    ]
    for case, rollouts, groups, peer_name, ours, peer in cases:
        start = time.perf_counter()
        first = jax.block_until_ready(ours())  # compiles
        compile_s = time.perf_counter() - start
        difference = max_abs_diff(first, peer())
        if difference > 1e-4:
            raise SystemExit(f"{case}: nash_jax and the {peer_name} peer differ by {difference}")
        _, ours_s = time_call(lambda: jax.block_until_ready(ours()), repeats=args.repeats)
        _, peer_s = time_call(peer, repeats=args.repeats)
        emit(case=case, rollouts=rollouts, groups=groups, jax_backend=jax.default_backend(),
             time_s=round(ours_s, 6), compile_s=round(compile_s, 3), peer=peer_name,
             peer_time_s=round(peer_s, 6), ratio=round(peer_s / ours_s, 2),
             max_abs_diff_vs_peer=difference, fraction_of_peak=None)


if __name__ == "__main__":
    main()
