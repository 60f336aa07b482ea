"""Best-of-n reranking with a judge: of n responses to a prompt, keep the one with the highest win rate
among them, P̂_i = mean_j P(y_i ≻ y_j).

The SPPO paper reports best-of-16 with PairRM on top of its models. Reranking with the judge a policy
was trained against compounds judge exploitation: the report labels it so.
"""

import numpy as np

from nash_jax.judges.base import judge_in_chunks


def best_of_n(judge, prompts, candidates, *, per_call, where):
    """prompts [B], candidates [B][n] → (chosen [B] ints, win_rates [B, n]): the index of each prompt's
    candidate with the highest win rate among its n (ties to the earlier one)."""
    pref = judge_in_chunks(judge, prompts, candidates, per_call=per_call, where=where)
    wins = pref.mean(axis=2)
    return wins.argmax(axis=1), wins


def rerank_groups(columns, n, judge, prompts, *, per_call, where="best-of-n reranking"):
    """columns: sample_rows' per-prompt columns with S·n samples per prompt, in S consecutive groups of
    n; returns the same columns with S samples per prompt, each the best of its group, plus
    `judge_win_rate` (its win rate among the group)."""
    samples = len(columns["responses"][0])
    if samples % n:
        raise ValueError(f"{samples} samples per prompt do not split into groups of n={n}")
    groups = samples // n
    flat_prompts = [p for p in prompts for _ in range(groups)]
    flat_candidates = [rs[g * n:(g + 1) * n] for rs in columns["responses"] for g in range(groups)]
    chosen, wins = best_of_n(judge, flat_prompts, flat_candidates, per_call=per_call, where=where)
    chosen, wins = chosen.reshape(len(prompts), groups), wins.reshape(len(prompts), groups, n)
    out = {key: [[row[g * n + int(chosen[b, g])] for g in range(groups)] for b, row in enumerate(column)]
           for key, column in columns.items()}
    out["judge_win_rate"] = np.take_along_axis(wins, chosen[..., None], axis=2)[..., 0].tolist()
    return out
