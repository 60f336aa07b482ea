"""Win-rate saturation: when the judge cannot tell a policy's samples apart, P̂ → ½ for all of them and
SPPO's gradient, −2η(P̂ − ½)∇log π(y) per example, vanishes."""

import numpy as np

TIE_TOLERANCE = 0.02  # |P[i, j] − ½| at most this for every pair: the judge cannot tell them apart


def win_rate_saturation(pref, trained=None, tie_tolerance=TIE_TOLERANCE):
    """pref [B, K, K]: the judged matrices of one iteration; trained [B, K] bool: the samples trained
    on (default all).

    Returns {"mean_abs_advantage": mean |P̂ − ½| over the trained samples (P̂ the row means),
             "indistinct_share": share of prompts whose K samples are all within tie_tolerance of ½
                                 against each other}."""
    pref = np.asarray(pref, np.float64)
    if pref.ndim != 3 or pref.shape[1] != pref.shape[2]:
        raise ValueError(f"preference matrices of shape {pref.shape}; expected [prompts, K, K]")
    advantage = np.abs(pref.mean(axis=2) - 0.5)
    trained = np.ones(advantage.shape, bool) if trained is None else np.asarray(trained, bool)
    if trained.shape != advantage.shape or not trained.any():
        raise ValueError(f"trained mask of shape {trained.shape} with {int(trained.sum())} samples; "
                         f"expected {advantage.shape} with at least one sample")
    indistinct = np.abs(pref - 0.5).max(axis=(1, 2)) <= tie_tolerance
    return {"mean_abs_advantage": float(advantage[trained].mean()),
            "indistinct_share": float(indistinct.mean())}
