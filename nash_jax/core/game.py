"""Exact solvers for tabular preference games (numpy/scipy, float64).

A game is a K×K matrix P with P[i, j] = P(y_i ≻ y_j): entries in [0, 1], P + Pᵀ = 1, diagonal 1/2.
The game in which each player picks a mixture over the K responses and player one earns
P(π ≻ π') = πᵀ P π' is symmetric and constant-sum with value 1/2. These solvers give the exact answers
that the neural algorithms (SPPO, Nash-MD-PG) approximate, and the yardstick they are measured by:
exploitability, max_y P(y ≻ π) − 1/2, which is 0 exactly at a Nash equilibrium.
"""

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog, minimize
from scipy.special import expit, log_expit, log_softmax, softmax

MATRIX_ATOL = 1e-6


def validate_preference_matrix(pref, names=None, atol=MATRIX_ATOL):
    """Return `pref` as a float64 array, or raise ValueError naming the first offending entry.

    names: optional response names used in the messages instead of indices.
    """
    p = np.asarray(pref, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] != p.shape[1] or p.shape[0] < 1:
        raise ValueError(f"preference matrix must be square K×K with K ≥ 1; got shape {p.shape}")
    k = p.shape[0]
    if names is not None and len(names) != k:
        raise ValueError(f"{len(names)} response names for a {k}×{k} preference matrix")

    def entry(i, j):
        label = f"P[{i},{j}]" if names is None else f"P[{names[i]!r},{names[j]!r}]"
        return f"{label}={p[i, j].item()!r}"

    for i, j in zip(*np.nonzero(~np.isfinite(p))):
        raise ValueError(f"{entry(i, j)} is not a finite number; expected a probability in [0, 1]")
    for i, j in zip(*np.nonzero((p < -atol) | (p > 1 + atol))):
        raise ValueError(f"{entry(i, j)} is outside [0, 1]; expected a probability")
    for i in np.nonzero(np.abs(np.diag(p) - 0.5) > atol)[0]:
        raise ValueError(f"{entry(i, i)} on the diagonal; expected 0.5 (a response ties with itself)")
    for i, j in zip(*np.nonzero(np.abs(p + p.T - 1.0) > atol)):
        raise ValueError(
            f"{entry(i, j)} and {entry(j, i)} sum to {(p[i, j] + p[j, i]).item():.6g}; expected "
            "P[i,j] + P[j,i] = 1 (one of the two responses wins)"
        )
    return np.clip(p, 0.0, 1.0)


def _as_policy(pi, k, what="policy"):
    pi = np.asarray(pi, dtype=np.float64)
    if pi.shape != (k,) or np.any(pi < 0) or not np.isclose(pi.sum(), 1.0, atol=1e-6):
        raise ValueError(f"{what} must be a probability vector of length {k}; got {pi!r}")
    return pi / pi.sum()


def _uniform(k):
    return np.full(k, 1.0 / k)


@dataclass(frozen=True)
class NashEquilibrium:
    policy: np.ndarray  # [K] a maximin mixture
    value: float  # min_j P(π ≻ y_j), 1/2 for every valid matrix


def nash_equilibrium(pref):
    """Maximin mixture of the preference game by linear programming.

    maximise v subject to Σ_i π_i P[i, j] ≥ v for every j, Σ π = 1, π ≥ 0.
    """
    p = validate_preference_matrix(pref)
    k = p.shape[0]
    cost = np.zeros(k + 1)
    cost[-1] = -1.0  # variables (π_1..π_K, v); maximise v
    a_ub = np.hstack([-p.T, np.ones((k, 1))])  # v − (Pᵀπ)_j ≤ 0
    a_eq = np.concatenate([np.ones(k), [0.0]])[None, :]
    bounds = [(0.0, None)] * k + [(None, None)]
    result = linprog(cost, A_ub=a_ub, b_ub=np.zeros(k), A_eq=a_eq, b_eq=[1.0], bounds=bounds,
                     method="highs")
    if result.status != 0:
        raise RuntimeError(f"linear program for the Nash equilibrium failed: {result.message}")
    policy = np.clip(result.x[:k], 0.0, None)
    policy /= policy.sum()
    return NashEquilibrium(policy=policy, value=float(np.min(policy @ p)))


def exploitability(pref, pi):
    """max_y P(y ≻ π) − 1/2: how much a best response beats π by; 0 at a Nash equilibrium."""
    p = np.asarray(pref, dtype=np.float64)
    pi = _as_policy(pi, p.shape[0])
    return float(np.max(p @ pi) - 0.5)


def bradley_terry(pref, ridge=1e-6):
    """Maximum-likelihood Bradley-Terry scores r (centred) with P[i, j] ≈ σ(r_i − r_j).

    Maximises Σ_{i≠j} P[i, j] log σ(r_i − r_j) − ridge/2 ‖r‖². Without the ridge the estimate does not
    exist when some response never loses (its score runs off to infinity); the tiny default keeps it
    finite and leaves well-posed fits unchanged to ~1e-6.
    """
    p = validate_preference_matrix(pref)
    k = p.shape[0]
    off_diagonal = ~np.eye(k, dtype=bool)

    def negative_log_likelihood(r):
        diff = r[:, None] - r[None, :]
        nll = -np.sum(np.where(off_diagonal, p * log_expit(diff), 0.0))
        sigma = expit(diff)
        grad = -np.sum(np.where(off_diagonal, p - sigma, 0.0), axis=1)
        return nll + 0.5 * ridge * r @ r, grad + ridge * r

    def hessian(r):
        sigma = expit(r[:, None] - r[None, :])
        w = np.where(off_diagonal, 2.0 * sigma * (1.0 - sigma), 0.0)  # both (i,j) and (j,i) terms
        return np.diag(w.sum(axis=1)) - w + ridge * np.eye(k)

    result = minimize(negative_log_likelihood, np.zeros(k), jac=True, hess=hessian,
                      method="trust-exact", options={"gtol": 1e-10})
    scores = result.x
    return scores - scores.mean()


def rlhf_optimum(rewards, beta, mu=None):
    """The KL-regularised RLHF optimum π ∝ μ exp(r / β) (μ uniform unless given)."""
    r = np.asarray(rewards, dtype=np.float64)
    if beta <= 0:
        raise ValueError(f"beta must be positive; got {beta!r}")
    mu = _uniform(r.shape[0]) if mu is None else _as_policy(mu, r.shape[0], "reference mu")
    return softmax(np.log(mu) + r / beta)


@dataclass(frozen=True)
class MWUTrajectory:
    """Exact multiplicative weights π_{t+1} ∝ π_t exp(η P π_t), run for `steps` updates."""

    eta: float
    iterates: np.ndarray  # [steps + 1, K]: π_0 … π_steps
    last_trace: np.ndarray  # [steps]: exploitability of π_t, t = 1..steps
    average_trace: np.ndarray  # [steps]: exploitability of mean(π_0..π_{t−1}), t = 1..steps

    @property
    def last(self):
        return self.iterates[-1]

    @property
    def average(self):
        """The average of the iterates played, π_0 … π_{steps−1}: the one with the guarantee."""
        return self.iterates[:-1].mean(axis=0)


def multiplicative_weights(pref, eta, steps, pi0=None):
    """Run the exact SPPO update (multiplicative weights in self-play) from π_0 (uniform default).

    The running average of the played iterates has exploitability ≤ log K/(η t) + η/8 after t
    steps (Hedge's regret bound, since πᵀPπ = 1/2 for every π); the last iterate may cycle.
    """
    p = validate_preference_matrix(pref)
    k = p.shape[0]
    if eta <= 0 or steps < 1:
        raise ValueError(f"need eta > 0 and steps ≥ 1; got eta={eta!r}, steps={steps!r}")
    pi = _uniform(k) if pi0 is None else _as_policy(pi0, k, "pi0")
    iterates = np.empty((steps + 1, k))
    iterates[0] = pi
    for t in range(steps):
        pi = softmax(np.log(pi) + eta * (p @ pi))
        iterates[t + 1] = pi
    played_average = np.cumsum(iterates[:-1], axis=0) / np.arange(1, steps + 1)[:, None]
    return MWUTrajectory(
        eta=float(eta),
        iterates=iterates,
        last_trace=np.max(iterates[1:] @ p.T, axis=1) - 0.5,
        average_trace=np.max(played_average @ p.T, axis=1) - 0.5,
    )


@dataclass(frozen=True)
class NashMDTrajectory:
    """Exact Nash-MD iterates and the exploitability of each (t = 1..steps)."""

    tau: float
    iterates: np.ndarray  # [steps + 1, K]
    trace: np.ndarray  # [steps]

    @property
    def last(self):
        return self.iterates[-1]


def nash_md_step_size(tau, t):
    """η_t = 2 / (τ (t + 2)): the schedule with O(1/T) last-iterate convergence (NLHF, Thm. 1)."""
    return 2.0 / (tau * (t + 2))


def nash_md(pref, tau, steps, mu=None, pi0=None, step_size=nash_md_step_size):
    """Exact Nash-MD: π_{t+1} ∝ π_t^μ exp(η_t P π_t^μ), with π_t^μ ∝ π_t^(1−η_t τ) μ^(η_t τ).

    The last iterate converges to the regularised equilibrium π*_τ ∝ μ exp(P π*_τ / τ), which nears a
    Nash equilibrium of the unregularised game as τ → 0. μ and π_0 default to uniform.
    step_size(tau, t) gives η_t; it must keep η_t τ ≤ 1.
    """
    p = validate_preference_matrix(pref)
    k = p.shape[0]
    if tau <= 0 or steps < 1:
        raise ValueError(f"need tau > 0 and steps ≥ 1; got tau={tau!r}, steps={steps!r}")
    log_mu = np.log(_uniform(k) if mu is None else _as_policy(mu, k, "reference mu"))
    pi = _uniform(k) if pi0 is None else _as_policy(pi0, k, "pi0")
    iterates = np.empty((steps + 1, k))
    iterates[0] = pi
    for t in range(steps):
        eta = step_size(tau, t)
        mix_weight = eta * tau
        if not 0.0 <= mix_weight <= 1.0:
            raise ValueError(f"step size η_{t}={eta!r} gives η τ={mix_weight!r}; expected [0, 1]")
        if mix_weight < 1.0:
            with np.errstate(divide="ignore"):  # log 0 = −inf keeps zero-mass responses at zero
                log_mixture = log_softmax((1.0 - mix_weight) * np.log(pi) + mix_weight * log_mu)
        else:
            log_mixture = log_mu
        pi = softmax(log_mixture + eta * (p @ np.exp(log_mixture)))
        iterates[t + 1] = pi
    return NashMDTrajectory(
        tau=float(tau),
        iterates=iterates,
        trace=np.max(iterates[1:] @ p.T, axis=1) - 0.5,
    )


def regularised_equilibrium_residual(pref, tau, pi, mu=None):
    """max |π − softmax(log μ + P π / τ)|: zero exactly at the KL-regularised equilibrium π*_τ."""
    p = np.asarray(pref, dtype=np.float64)
    k = p.shape[0]
    pi = _as_policy(pi, k)
    log_mu = np.log(_uniform(k) if mu is None else _as_policy(mu, k, "reference mu"))
    return float(np.max(np.abs(pi - softmax(log_mu + p @ pi / tau))))
