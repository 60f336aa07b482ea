"""The clipped policy-gradient loss: REINFORCE at ratio 1, no gradient through bound clips, the k3 KL,
and the aggregation of reference/notes_self_play.md §4 I."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nash_jax.core.policy_gradient import pg_token_loss


def random_batch(seed, n=4, t=6):
    rng = np.random.default_rng(seed)
    logp = jnp.asarray(rng.normal(-2, 1, (n, t)), jnp.float32)
    mask = jnp.asarray(np.arange(t)[None, :] < rng.integers(1, t + 1, (n, 1)))
    adv = jnp.asarray(rng.normal(size=n), jnp.float32)
    return logp, mask, adv


@given(seed=st.integers(0, 2**31 - 1), aggregation=st.sampled_from(["token-mean", "drgrpo"]))
@settings(max_examples=30, deadline=None)
def test_gradient_at_ratio_one_is_reinforce(seed, aggregation):
    logp, mask, adv = random_batch(seed)
    grad = jax.grad(lambda lp: pg_token_loss(lp, logp, adv, mask, aggregation=aggregation,
                                             max_len=10)[0])(logp)
    denominator = mask.sum() if aggregation == "token-mean" else mask.shape[0] * 10
    expected = np.where(mask, -np.asarray(adv)[:, None] / float(denominator), 0.0)
    np.testing.assert_allclose(np.asarray(grad), expected, atol=1e-7, rtol=1e-6)


def test_clipped_tokens_carry_no_gradient():
    behaviour = jnp.zeros((2, 4))
    # ratios e^0.5 = 1.65 and e^-0.5 = 0.61 lie outside [0.8, 1.28]; 1.1 and 0.9 inside
    log_ratio = jnp.log(jnp.array([[1.65, 1.1, 0.61, 0.9], [1.65, 1.1, 0.61, 0.9]]))
    adv = jnp.array([1.0, -1.0])
    mask = jnp.ones((2, 4), bool)
    loss_fn = lambda lp: pg_token_loss(lp, behaviour, adv, mask, clip_low=0.2, clip_high=0.28)
    grad = np.asarray(jax.grad(lambda lp: loss_fn(lp)[0])(log_ratio))
    # A > 0: ratio above 1 + ε_high is clipped; A < 0: ratio below 1 − ε_low is clipped
    assert grad[0, 0] == 0.0 and grad[1, 2] == 0.0, grad
    # the other side of the clip (ratio small with A > 0, large with A < 0) still pushes
    assert np.all(grad[0, 1:] != 0.0) and np.all(grad[1, [0, 1, 3]] != 0.0), grad
    _, metrics = loss_fn(log_ratio)
    np.testing.assert_allclose(float(metrics["clip_fraction"]), 2 / 8)


def test_clip_higher_is_separate_from_clip_low():
    behaviour = jnp.zeros((1, 1))
    mask = jnp.ones((1, 1), bool)
    logp = jnp.log(jnp.array([[1.25]]))
    for clip_high, clipped in ((0.2, True), (0.28, False)):
        grad = jax.grad(lambda lp: pg_token_loss(lp, behaviour, jnp.ones(1), mask,
                                                 clip_high=clip_high)[0])(logp)
        assert (float(grad[0, 0]) == 0.0) == clipped, (clip_high, grad)


@given(logp=st.floats(-30, 0), ref=st.floats(-30, 0))
@settings(max_examples=100, deadline=None)
def test_k3_kl_of_a_token_is_nonnegative(logp, ref):
    one = jnp.ones((1, 1), bool)
    lp = jnp.full((1, 1), logp, jnp.float32)
    _, m = pg_token_loss(lp, lp, jnp.zeros(1), one, kl_coef=0.1, ref_logp=jnp.full((1, 1), ref))
    gap = np.float32(ref) - np.float32(logp)
    np.testing.assert_allclose(float(m["kl"]), np.expm1(gap) - gap, rtol=1e-4, atol=1e-6)
    assert float(m["kl"]) >= 0.0, (logp, ref, float(m["kl"]))


def test_k3_kl_is_zero_at_the_reference_and_enters_the_loss_times_kl_coef():
    logp, mask, adv = random_batch(3)
    _, at_ref = pg_token_loss(logp, logp, adv, mask, kl_coef=0.1, ref_logp=logp)
    assert float(at_ref["kl"]) == 0.0
    loss_plain, _ = pg_token_loss(logp, logp, adv, mask)
    for shift in (-3.0, -0.5, 0.2, 4.0):
        ref = logp + shift * jnp.linspace(0, 1, logp.shape[1])
        loss_kl, m = pg_token_loss(logp, logp, adv, mask, kl_coef=0.1, ref_logp=ref)
        assert float(m["kl"]) > 0.0, shift
        np.testing.assert_allclose(float(loss_kl - loss_plain), 0.1 * float(m["kl"]), atol=1e-6)


@pytest.mark.parametrize("aggregation,expected", [("token-mean", 1.0), ("seq-mean-token-mean", 1.0),
                                                  ("seq-mean-token-sum", 3.0), ("drgrpo", 0.375)])
def test_aggregation_of_vector_i(aggregation, expected):
    # ratio 1 and A = −1 make every token's loss exactly 1: the lengths 2 and 4 of §4 I, L_max = 8
    mask = jnp.arange(8)[None, :] < jnp.array([[2], [4]])
    logp = jnp.where(mask, -1.0, 123.0)  # garbage under padding
    loss, metrics = pg_token_loss(logp, jnp.where(mask, -1.0, -77.0), -jnp.ones(2), mask,
                                  aggregation=aggregation, max_len=8)
    np.testing.assert_allclose(float(loss), expected, rtol=1e-6)
    assert float(metrics["ratio_mean"]) == 1.0 and float(metrics["clip_fraction"]) == 0.0


def test_metrics_and_shape_errors():
    logp, mask, adv = random_batch(5)
    _, m = pg_token_loss(logp, logp, adv, mask)
    np.testing.assert_allclose([float(m["advantage_mean"]), float(m["advantage_std"])],
                               [np.mean(adv), np.std(adv)], rtol=1e-5)
    with pytest.raises(ValueError, match=r"advantages has shape \(3,\).*expected logp \[N, T\]"):
        pg_token_loss(logp, logp, adv[:3], mask)
    with pytest.raises(ValueError, match=r"mask has shape \(4, 5\)"):
        pg_token_loss(logp, logp, adv, mask[:, :5])


def test_jit_and_bf16_inputs_give_float32():
    logp, mask, adv = random_batch(7)
    fn = jax.jit(pg_token_loss, static_argnames=("aggregation", "max_len"))
    loss, metrics = fn(logp.astype(jnp.bfloat16), logp, adv, mask)
    assert loss.dtype == jnp.float32 and metrics["kl"].dtype == jnp.float32
