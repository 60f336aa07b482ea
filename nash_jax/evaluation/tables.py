"""Cross-iterate tables: every pair of iterates judged on the same prompts, and the cycles among them."""

import itertools

import numpy as np

from nash_jax.judges.base import judge_in_chunks


def judged_matrices(judge, prompts, responses_per_iterate, per_call):
    """[M, B, n, n]: P(y_a ≻ y_b) between iterates a and b on prompt b's m-th sample; one n = #iterates
    candidate list per prompt and sample index."""
    n = len(responses_per_iterate)
    samples = len(responses_per_iterate[0][0])
    out = []
    for m in range(samples):
        candidates = [[responses_per_iterate[a][b][m] for a in range(n)] for b in range(len(prompts))]
        out.append(judge_in_chunks(judge, prompts, candidates, per_call=per_call,
                                   where=f"evaluation sample {m}"))
    return np.stack(out)


def win_rate_table(judge, prompts, responses_per_iterate, per_call):
    """T[a, b] = mean over prompts and sample index of P(y_a ≻ y_b)."""
    return judged_matrices(judge, prompts, responses_per_iterate, per_call).mean(axis=(0, 1))


def find_cycles(table, labels):
    """Every 3-cycle a ≻ b ≻ c ≻ a among iterates (≻: table entry above 1/2), as label triples."""
    table = np.asarray(table)
    cycles = []
    for a, b, c in itertools.combinations(range(len(labels)), 3):
        for x, y, z in ((a, b, c), (a, c, b)):
            if table[x, y] > 0.5 and table[y, z] > 0.5 and table[z, x] > 0.5:
                cycles.append([labels[x], labels[y], labels[z]])
    return cycles
