import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit

from nash_jax.core import game

RPS = np.array([[0.5, 0.0, 1.0],
                [1.0, 0.5, 0.0],
                [0.0, 1.0, 0.5]])


@st.composite
def preference_matrices(draw, min_k=2, max_k=7):
    k = draw(st.integers(min_k, max_k))
    upper = draw(st.lists(st.floats(0, 1), min_size=k * (k - 1) // 2, max_size=k * (k - 1) // 2))
    p = np.full((k, k), 0.5)
    p[np.triu_indices(k, 1)] = upper
    lower = np.tril_indices(k, -1)
    p[lower] = 1.0 - p.T[lower]
    return p


def bradley_terry_matrix(scores):
    s = np.asarray(scores, dtype=np.float64)
    return expit(s[:, None] - s[None, :])


def test_rock_paper_scissors_equilibrium_is_uniform_with_value_half():
    nash = game.nash_equilibrium(RPS)
    np.testing.assert_allclose(nash.policy, [1 / 3] * 3, atol=1e-9)
    assert nash.value == pytest.approx(0.5, abs=1e-9)
    assert game.exploitability(RPS, [1.0, 0.0, 0.0]) == pytest.approx(0.5)


def test_bradley_terry_game_puts_all_mass_on_the_best_response():
    p = bradley_terry_matrix([0.3, 1.2, -0.4, 0.9])
    nash = game.nash_equilibrium(p)
    np.testing.assert_allclose(nash.policy, [0, 1, 0, 0], atol=1e-9)
    assert nash.value == pytest.approx(0.5, abs=1e-9)


def test_bradley_terry_fit_recovers_centred_scores():
    scores = np.array([0.3, 1.2, -0.4, 0.9, -2.0])
    fitted = game.bradley_terry(bradley_terry_matrix(scores))
    np.testing.assert_allclose(fitted, scores - scores.mean(), atol=1e-4)
    assert abs(fitted.sum()) < 1e-9


def test_bradley_terry_fit_stays_finite_when_a_response_never_loses():
    fitted = game.bradley_terry([[0.5, 1.0], [0.0, 0.5]])
    assert np.all(np.isfinite(fitted)) and fitted[0] > fitted[1]


def test_rlhf_optimum_is_reference_tilted_by_exponentiated_reward():
    pi = game.rlhf_optimum([1.0, 0.0], beta=0.5, mu=[0.25, 0.75])
    expected = np.array([0.25 * np.e ** 2, 0.75]) / (0.25 * np.e ** 2 + 0.75)
    np.testing.assert_allclose(pi, expected, rtol=1e-12)


def test_multiplicative_weights_first_step_by_hand():
    p = np.array([[0.5, 0.8], [0.2, 0.5]])
    run = game.multiplicative_weights(p, eta=2.0, steps=1)
    # From uniform: P π_0 = (0.65, 0.35), so π_1 ∝ (e^1.3, e^0.7).
    expected = np.exp([1.3, 0.7]) / np.exp([1.3, 0.7]).sum()
    np.testing.assert_allclose(run.last, expected, rtol=1e-12)
    assert run.last_trace[0] == pytest.approx(np.max(p @ expected) - 0.5)
    assert run.average_trace[0] == pytest.approx(game.exploitability(p, [0.5, 0.5]))


@given(preference_matrices())
@settings(max_examples=80, deadline=None)
def test_any_valid_matrix_has_value_half_and_an_unexploitable_equilibrium(p):
    nash = game.nash_equilibrium(p)
    assert nash.value == pytest.approx(0.5, abs=1e-7)
    assert game.exploitability(p, nash.policy) <= 1e-6
    assert nash.policy.min() >= 0 and nash.policy.sum() == pytest.approx(1.0)


@given(preference_matrices(), st.sampled_from([0.05, 0.2, 1.0]))
@settings(max_examples=40, deadline=None)
def test_mwu_average_exploitability_falls_within_the_hedge_regret_bound(p, eta):
    steps = 400
    run = game.multiplicative_weights(p, eta, steps)
    t = np.arange(1, steps + 1)
    bound = np.log(p.shape[0]) / (eta * t) + eta / 8
    excess = run.average_trace - bound
    assert np.all(excess <= 1e-9), f"bound broken at step {int(np.argmax(excess)) + 1}"
    # So the average gets better with steps: far into the run it is within the late bound.
    assert run.average_trace[-1] <= bound[-1] + 1e-9


def test_mwu_last_iterate_cycles_while_the_average_converges_on_a_cycle():
    p = np.array([[0.5, 0.9, 0.3, 0.6], [0.1, 0.5, 0.6, 0.4],
                  [0.7, 0.4, 0.5, 0.65], [0.4, 0.6, 0.35, 0.5]])
    run = game.multiplicative_weights(p, eta=1.0, steps=2000)
    assert run.average_trace[-1] < 0.01 < run.average_trace[9]
    assert np.max(run.last_trace[-200:]) > 0.1, "the last iterate should keep cycling"


def test_nash_md_last_iterate_reaches_the_regularised_equilibrium():
    p = np.array([[0.5, 0.9, 0.3, 0.6], [0.1, 0.5, 0.6, 0.4],
                  [0.7, 0.4, 0.5, 0.65], [0.4, 0.6, 0.35, 0.5]])
    mu = np.array([0.4, 0.3, 0.2, 0.1])
    for tau in (1.0, 0.1):
        run = game.nash_md(p, tau, steps=20000, mu=mu)
        residual = game.regularised_equilibrium_residual(p, tau, run.last, mu=mu)
        assert residual < 1e-3, (tau, residual)
    weak, strong = game.nash_md(p, 0.02, 3000), game.nash_md(p, 0.5, 3000)
    assert weak.trace[-1] < strong.trace[-1], "less regularisation should get closer to Nash"


def test_nash_md_first_step_from_uniform_by_hand():
    p = np.array([[0.5, 0.8], [0.2, 0.5]])
    run = game.nash_md(p, tau=0.5, steps=1)
    # η_0 = 2/(τ·2) = 2, η_0 τ = 1: the mixture is μ (uniform), π_1 ∝ exp(2 P μ).
    expected = np.exp(2 * (p @ [0.5, 0.5]))
    np.testing.assert_allclose(run.last, expected / expected.sum(), rtol=1e-12)


@pytest.mark.parametrize("matrix, message", [
    ([[0.5, 0.5, 0.5]], "square"),
    ([[0.5, np.nan], [0.5, 0.5]], r"P\[0,1\]=nan is not a finite number"),
    ([[0.5, 1.2], [-0.2, 0.5]], r"P\[0,1\]=1.2 is outside \[0, 1\]"),
    ([[0.4, 0.5], [0.5, 0.5]], r"P\[0,0\]=0.4 on the diagonal; expected 0.5"),
    ([[0.5, 0.7], [0.4, 0.5]], r"P\[0,1\]=0.7 and P\[1,0\]=0.4 sum to"),
])
def test_invalid_matrices_are_rejected_naming_the_entry(matrix, message):
    with pytest.raises(ValueError, match=message):
        game.validate_preference_matrix(matrix)


def test_validation_messages_use_response_names():
    with pytest.raises(ValueError, match=r"P\['good','bad'\]=0.7 and P\['bad','good'\]=0.4"):
        game.validate_preference_matrix([[0.5, 0.7], [0.4, 0.5]], names=["good", "bad"])


def test_bad_policies_and_parameters_are_rejected():
    with pytest.raises(ValueError, match="probability vector of length 3"):
        game.exploitability(RPS, [0.5, 0.5])
    with pytest.raises(ValueError, match="eta > 0"):
        game.multiplicative_weights(RPS, eta=0.0, steps=10)
    with pytest.raises(ValueError, match="tau > 0"):
        game.nash_md(RPS, tau=-1.0, steps=10)
    with pytest.raises(ValueError, match="beta must be positive"):
        game.rlhf_optimum([0.0, 1.0], beta=0.0)
