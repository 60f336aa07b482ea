"""Length-controlled win rates, in the spirit of AlpacaEval 2's.

A judge that likes long answers rewards a policy for growing its responses. To separate that from
quality, fit the judge's preferences between two policies a and b with a logistic model that has a term
in their (normalised) length difference,

    logit P(y_a ≻ y_b | x) = θ + φ · tanh(Δ / sd(Δ)),    Δ = len(y_a) − len(y_b),

by maximum likelihood on the judged probabilities (soft labels), and read the win rate the model predicts
at equal length, σ(θ). AlpacaEval 2 adds a per-instruction difficulty term; with the two policies
judged on the same prompts, the intercept plays its part here. A weak L2 penalty keeps the fit finite when
the judge's labels are 0/1 and separated by length.
"""

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, log_expit

L2 = 0.1  # on (θ, φ); negligible next to the log-likelihood of a few hundred judged pairs


def normalised_length_difference(length_diff):
    """tanh(Δ / sd(Δ)) [N]; zeros when every Δ is the same (no length signal to fit)."""
    length_diff = np.asarray(length_diff, np.float64)
    scale = length_diff.std()
    if scale == 0:
        return np.zeros_like(length_diff)
    return np.tanh(length_diff / scale)


def fit_length_controlled(prefs, length_diff, l2=L2):
    """prefs [N]: judged P(y_a ≻ y_b), one per prompt and sample; length_diff [N]: len(y_a) − len(y_b).

    Returns {"raw": mean P, "length_controlled": σ(θ), "length_coefficient": φ}."""
    prefs = np.asarray(prefs, np.float64)
    length_diff = np.asarray(length_diff, np.float64)
    if prefs.ndim != 1 or prefs.shape != length_diff.shape or not len(prefs):
        raise ValueError(f"prefs {prefs.shape} and length differences {length_diff.shape}; expected two "
                         "equal, non-empty 1-D arrays (one entry per judged pair)")
    if not np.all((prefs >= 0) & (prefs <= 1)):
        raise ValueError(f"prefs outside [0, 1] (min {prefs.min()}, max {prefs.max()}); expected "
                         "probabilities P(y_a ≻ y_b)")
    features = np.stack([np.ones_like(prefs), normalised_length_difference(length_diff)], axis=1)

    def loss_and_grad(w):
        z = features @ w
        nll = -np.sum(prefs * log_expit(z) + (1 - prefs) * log_expit(-z)) + 0.5 * l2 * w @ w
        grad = features.T @ (expit(z) - prefs) + l2 * w
        return nll, grad

    result = minimize(loss_and_grad, np.zeros(2), jac=True, method="L-BFGS-B")
    if not result.success:
        raise ValueError(f"length-controlled fit did not converge on {len(prefs)} judged pairs: "
                         f"{result.message}")
    theta, phi = result.x
    return {"raw": float(prefs.mean()), "length_controlled": float(expit(theta)),
            "length_coefficient": float(phi)}


def length_controlled_table(pref, lengths):
    """pref [M, B, n, n]: judged P(y_a ≻ y_b) of iterates a, b on prompt b's m-th sample; lengths
    [n, B, M]: each response's length. Returns LC [n, n]: the length-controlled P(a ≻ b), ½ on the
    diagonal, LC[b, a] = 1 − LC[a, b] (each pair fitted once)."""
    pref = np.asarray(pref, np.float64)
    lengths = np.asarray(lengths, np.float64)
    m, b, n, _ = pref.shape
    if lengths.shape != (n, b, m):
        raise ValueError(f"lengths {lengths.shape}; expected [iterates, prompts, samples] = {(n, b, m)} "
                         "to match the judged matrices")
    table = np.full((n, n), 0.5)
    for i in range(n):
        for j in range(i + 1, n):
            fit = fit_length_controlled(pref[:, :, i, j].T.ravel(), (lengths[i] - lengths[j]).ravel())
            table[i, j], table[j, i] = fit["length_controlled"], 1 - fit["length_controlled"]
    return table
