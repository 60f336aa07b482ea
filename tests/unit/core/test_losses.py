import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from nash_jax.core import losses

# The worked example of the SPPO explainer: one prompt, K = 3 samples.
WORKED_PREF = np.array([[0.5, 0.8, 0.6],
                        [0.2, 0.5, 0.3],
                        [0.4, 0.7, 0.5]], dtype=np.float32)
ETA = 1000.0


def test_worked_example_win_rates_and_targets():
    win = np.asarray(losses.win_rates(jnp.asarray(WORKED_PREF)))
    np.testing.assert_allclose(win, [0.633333, 0.333333, 0.533333], atol=1e-5)
    np.testing.assert_allclose(ETA * (win - 0.5), [133.333, -166.667, 33.333], atol=1e-2)


def test_worked_example_winner_loser_loss_and_gradient_coefficients():
    win = losses.win_rates(jnp.asarray(WORKED_PREF))
    win_pair = win[jnp.array([0, 1])]  # winner y1, loser y2
    zero = jnp.zeros(2)
    mean_loss = losses.sppo_loss(zero, zero, win_pair, ETA)
    assert abs(float(mean_loss) * 2 - 45555.6) < 0.5, float(mean_loss) * 2
    assert abs(float(mean_loss) - 22777.8) < 0.5, float(mean_loss)
    summed = jax.grad(lambda lp: 2 * losses.sppo_loss(lp, zero, win_pair, ETA))(zero)
    # The descent direction's coefficients on ∇ log π: raise y1 by 266.7, lower y2 by 333.3.
    np.testing.assert_allclose(-np.asarray(summed), [266.667, -333.333], atol=1e-2)


@given(n=st.integers(1, 16), eta=st.floats(1e-2, 1e4), seed=st.integers(0, 2**31 - 1))
@settings(max_examples=50, deadline=None)
def test_sppo_gradient_at_anchor_is_reinforce_with_half_baseline(n, eta, seed):
    rng = np.random.default_rng(seed)
    anchor = jnp.asarray(rng.normal(-50, 20, n), jnp.float32)
    win = jnp.asarray(rng.uniform(0, 1, n), jnp.float32)
    grad = jax.grad(losses.sppo_loss)(anchor, anchor, win, eta)
    expected = -2 * eta * (np.asarray(win) - 0.5) / n
    np.testing.assert_allclose(np.asarray(grad), expected, rtol=1e-5, atol=1e-6 * eta)


def test_sequence_logprobs_matches_torch_log_softmax_gather():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, (3, 7, 11)).astype(np.float32)
    targets = rng.integers(0, 11, (3, 7))
    mask = rng.uniform(size=(3, 7)) < 0.6
    ours = np.asarray(losses.sequence_logprobs(jnp.asarray(logits), jnp.asarray(targets),
                                               jnp.asarray(mask)))
    t_logp = torch.log_softmax(torch.from_numpy(logits), -1)
    picked = torch.gather(t_logp, -1, torch.from_numpy(targets)[..., None])[..., 0]
    reference = (picked * torch.from_numpy(mask)).sum(-1).numpy()
    diff = np.max(np.abs(ours - reference))
    assert diff < 1e-5, f"max |ours − torch| = {diff}"


def test_sequence_logprobs_hand_computed():
    # Two-token vocabulary, logits (0, log 3): probabilities 1/4 and 3/4.
    logits = jnp.array([[[0.0, np.log(3.0)], [0.0, np.log(3.0)], [5.0, -5.0]]])
    targets = jnp.array([[1, 0, 1]])
    mask = jnp.array([[True, True, False]])
    got = float(losses.sequence_logprobs(logits, targets, mask)[0])
    assert abs(got - (np.log(0.75) + np.log(0.25))) < 1e-6, got


def test_sequence_logprobs_ignores_out_of_range_targets_under_mask():
    logits = jnp.zeros((1, 3, 4))
    targets = jnp.array([[2, -100, 99]])
    mask = jnp.array([[True, False, False]])
    got = float(losses.sequence_logprobs(logits, targets, mask)[0])
    assert got == pytest.approx(np.log(0.25)), got


@given(
    logits=hnp.arrays(np.float32, (2, 5, 6), elements=st.floats(-30, 30, width=32)),
    noise=hnp.arrays(np.float32, (2, 5, 6), elements=st.floats(-1e4, 1e4, width=32)),
    targets=hnp.arrays(np.int32, (2, 5), elements=st.integers(0, 5)),
    mask=hnp.arrays(bool, (2, 5)),
)
@settings(max_examples=40, deadline=None)
def test_masked_positions_contribute_exactly_zero(logits, noise, targets, mask):
    base = losses.sequence_logprobs(jnp.asarray(logits), jnp.asarray(targets), jnp.asarray(mask))
    # Change logits and targets only where the mask is false: the result must not move at all.
    hidden = ~mask
    logits2 = np.where(hidden[..., None], noise, logits)
    targets2 = np.where(hidden, (targets + 3) % 6, targets)
    moved = losses.sequence_logprobs(jnp.asarray(logits2), jnp.asarray(targets2), jnp.asarray(mask))
    np.testing.assert_array_equal(np.asarray(base), np.asarray(moved))
    per_token = losses.token_logprobs(jnp.asarray(logits), jnp.asarray(targets), jnp.asarray(mask))
    assert np.all(np.asarray(per_token)[hidden] == 0.0)
    assert np.all(np.asarray(per_token) <= 0.0)


def test_bf16_logits_give_float32_logprobs_and_losses():
    logits = jnp.ones((2, 3, 5), jnp.bfloat16)
    out = losses.sequence_logprobs(logits, jnp.zeros((2, 3), jnp.int32), jnp.ones((2, 3), bool))
    assert out.dtype == jnp.float32
    half = jnp.ones(2, jnp.bfloat16)
    assert losses.sppo_loss(half, half, half, 10.0).dtype == jnp.float32
    assert losses.dpo_loss(half, half, half, half, 0.1).dtype == jnp.float32


extreme = st.floats(-1e4, 1e4, width=32)


@given(lw=extreme, rw=extreme, ll=extreme, rl=extreme, win=st.floats(0, 1),
       beta=st.floats(1e-3, 10), tau=st.floats(0, 10))
@settings(max_examples=100, deadline=None)
def test_losses_and_gradients_finite_for_extreme_inputs(lw, rw, ll, rl, win, beta, tau):
    lw, rw, ll, rl, w = (jnp.array([x], jnp.float32) for x in (lw, rw, ll, rl, win))
    for fn in (losses.sppo_hard_loss, losses.dpo_loss, losses.ipo_loss):
        value, grads = jax.value_and_grad(fn, argnums=(0, 2))(lw, rw, ll, rl, beta)
        assert np.isfinite(float(value)), (fn.__name__, float(value))
        assert all(np.isfinite(np.asarray(g)).all() for g in grads), fn.__name__
    value, grad = jax.value_and_grad(losses.sppo_loss)(lw, rw, w, 1.0 / beta)
    assert np.isfinite(float(value)) and np.isfinite(np.asarray(grad)).all()
    value, grad = jax.value_and_grad(losses.nash_md_pg_loss)(lw, rw, w, tau)
    assert np.isfinite(float(value)) and np.isfinite(np.asarray(grad)).all()


@given(a=hnp.arrays(np.float32, 4, elements=st.floats(-100, 100, width=32)),
       b=hnp.arrays(np.float32, 4, elements=st.floats(-100, 100, width=32)),
       beta=st.floats(1e-2, 10))
@settings(max_examples=50, deadline=None)
def test_sppo_hard_is_two_soft_terms_with_win_rates_one_and_zero(a, b, beta):
    zeros = jnp.zeros(4)
    hard = losses.sppo_hard_loss(jnp.asarray(a), zeros, jnp.asarray(b), zeros, beta)
    soft_w = losses.sppo_loss(jnp.asarray(a), zeros, jnp.ones(4), 1.0 / beta)
    soft_l = losses.sppo_loss(jnp.asarray(b), zeros, jnp.zeros(4), 1.0 / beta)
    np.testing.assert_allclose(float(hard), float(soft_w + soft_l), rtol=1e-5)


def test_pairwise_losses_hand_computed():
    # log-ratios a = Δ_w = 1, b = Δ_l = −1 (references at zero), β = 0.1.
    args = (jnp.array([1.0]), jnp.array([0.0]), jnp.array([-1.0]), jnp.array([0.0]), 0.1)
    assert float(losses.dpo_loss(*args)) == pytest.approx(np.log1p(np.exp(-0.2)), rel=1e-6)
    assert float(losses.ipo_loss(*args)) == pytest.approx((2.0 - 5.0) ** 2, rel=1e-6)
    assert float(losses.sppo_hard_loss(*args)) == pytest.approx((1 - 5) ** 2 + (-1 + 5) ** 2,
                                                                rel=1e-6)


def test_nash_md_pg_gradient_is_regularised_reinforce():
    logp = jnp.array([-3.0, -7.0, -1.5])
    logp_ref = jnp.array([-4.0, -6.0, -1.5])
    pref = jnp.array([0.9, 0.2, 0.5])
    tau = 0.3
    grad_logp, grad_ref = jax.grad(losses.nash_md_pg_loss, argnums=(0, 1))(logp, logp_ref, pref, tau)
    advantage = np.asarray(pref) - 0.5 - tau * (np.asarray(logp) - np.asarray(logp_ref))
    np.testing.assert_allclose(np.asarray(grad_logp), -advantage / 3, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(grad_ref), 0.0)


def test_nash_md_pg_log_ratio_is_stop_gradient_through_parameters():
    # logp = θ·x: without the stop-gradient the KL term would add −τ·x·logp/N to the gradient.
    x = jnp.array([1.0, 2.0])
    theta = jnp.array(-1.5)
    pref = jnp.array([0.7, 0.4])
    tau = 0.5

    def surrogate(th):
        return losses.nash_md_pg_loss(th * x, jnp.zeros(2), pref, tau)

    advantage = np.asarray(pref) - 0.5 - tau * float(theta) * np.asarray(x)
    expected = -np.mean(advantage * np.asarray(x))
    assert float(jax.grad(surrogate)(theta)) == pytest.approx(expected, rel=1e-6)


def test_every_loss_jits_to_the_same_values():
    rng = np.random.default_rng(1)
    v = [jnp.asarray(rng.normal(-10, 3, 5), jnp.float32) for _ in range(4)]
    win = jnp.asarray(rng.uniform(size=5), jnp.float32)
    cases = [
        (losses.sppo_loss, (v[0], v[1], win, 100.0)),
        (losses.sppo_hard_loss, (*v, 0.1)),
        (losses.dpo_loss, (*v, 0.1)),
        (losses.ipo_loss, (*v, 0.1)),
        (losses.nash_md_pg_loss, (v[0], v[1], win, 0.05)),
    ]
    for fn, args in cases:
        np.testing.assert_allclose(float(jax.jit(fn)(*args)), float(fn(*args)), rtol=1e-6)
