"""Best-of-n reranking with a judge that prefers a known token."""

import numpy as np
from scipy.special import expit

from nash_jax.judges.base import PreferenceModel
from nash_jax.evaluation.reranking import best_of_n, rerank_groups


class LikesWitty(PreferenceModel):
    """P(y ≻ y') = σ(3 (s(y) − s(y'))), s = whether the response holds the token `witty`."""

    def _prob_matrix(self, prompts, candidates):
        s = np.array([[float("witty" in c.split()) for c in cands] for cands in candidates])
        return expit(3 * (s[:, :, None] - s[:, None, :]))


def test_best_of_n_picks_the_response_with_the_preferred_token():
    rng = np.random.default_rng(0)
    n, where = 6, rng.integers(0, 6, 20)
    candidates = [["plain reply"] * n for _ in where]
    for cands, k in zip(candidates, where):
        cands[k] = "witty reply"
    chosen, wins = best_of_n(LikesWitty(), ["p"] * len(where), candidates, per_call=7, where="test")
    np.testing.assert_array_equal(chosen, where)
    assert wins.shape == (20, n) and np.all(wins[np.arange(20), where] > 0.5)


def test_rerank_groups_keeps_the_best_of_each_group_with_its_columns():
    # two prompts, two groups of n = 3 each; the witty response sits at a different place in each group
    responses = [["plain a", "witty b", "plain c", "witty d", "plain e", "plain f"],
                 ["plain g", "plain h", "witty i", "plain j", "plain k", "plain l"]]
    columns = {"responses": responses, "lengths": [[2, 2, 2, 2, 2, 2], [1, 2, 3, 4, 5, 6]]}
    out = rerank_groups(columns, 3, LikesWitty(), ["p", "q"], per_call=3)
    assert out["responses"] == [["witty b", "witty d"], ["witty i", "plain j"]]
    assert out["lengths"] == [[2, 2], [3, 4]]
    assert out["judge_win_rate"][1][1] == 0.5  # a group of ties: the first one, at ½
