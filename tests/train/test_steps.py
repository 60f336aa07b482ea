"""The update steps: the same numbers on every mesh, the policy-gradient identities, accumulation,
progress on a fixed batch, and clear refusals of bad batches."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nash_jax.train import make_nash_md_pg_step, make_pair_step, make_sppo_step
from nash_jax.train.steps import nash_md_pg_objective, policy_logprobs, sppo_objective
from tests.train.conftest import MESHES, setup, token_batch

N = 8
ETA = 50.0


def sppo_batch(logprobs, params, seed=0):
    batch = token_batch(N, seed=seed)
    batch["anchor_logp"] = np.array(logprobs(params, batch))  # log-ratio 0: the start of an iteration
    batch["win_rate"] = np.random.default_rng(seed + 1).uniform(size=N).astype(np.float32)
    return batch


def pair_batch(logprobs, params):
    """N (winner, loser) pairs at log-ratio 0."""
    batch = token_batch(N, lead=(2,), seed=3)
    batch = {k: v.swapaxes(0, 1) for k, v in batch.items()}  # [N, 2, T]
    batch["anchor_logp"] = np.asarray(logprobs(params, flatten_pairs(batch))).reshape(N, 2)
    return batch


def flatten_pairs(batch):
    return {k: batch[k].reshape(2 * N, -1) for k in ("tokens", "segment_ids", "loss_mask")}


def nash_md_batch(logprobs, params):
    batch = token_batch(N, seed=5)
    batch["ref_logp"] = np.asarray(logprobs(params, batch)) - 0.3
    batch["pref"] = np.random.default_rng(6).uniform(size=N).astype(np.float32)
    return batch


def flat_params(state):
    return np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree.leaves(state.params)])


def run_steps(kind, shape, steps=2, micro_batches=1):
    model_def, state, shardings, mesh, tx, schedule, logprobs = setup(shape)
    if kind == "sppo":
        batch = sppo_batch(logprobs, state.params)
        step = make_sppo_step(model_def, tx, schedule, shardings, mesh, eta=ETA,
                              micro_batches=micro_batches)
    elif kind == "nash_md":
        batch = nash_md_batch(logprobs, state.params)
        step = make_nash_md_pg_step(model_def, tx, schedule, shardings, mesh, tau=0.1,
                                    micro_batches=micro_batches)
    else:
        batch = pair_batch(logprobs, state.params)
        step = make_pair_step(model_def, tx, schedule, shardings, mesh, loss=kind, beta=0.1,
                              micro_batches=micro_batches)
    losses = []
    for _ in range(steps):
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    assert step.jitted._cache_size() == 1, "the state was placed so that the step compiles once"
    return losses, flat_params(state), metrics


@pytest.mark.parametrize("kind", ["sppo", "dpo", "nash_md"])
def test_every_mesh_gives_the_same_losses_and_parameters(kind):
    ref_losses, ref_params, _ = run_steps(kind, (1, 1, 1))
    for shape in MESHES[1:]:
        losses, params, _ = run_steps(kind, shape)
        # The Nash-MD-PG surrogate is a small mean of advantage × log-prob terms of ~40 nats each, so
        # fp32 summation order alone moves it by a few 1e-6: compare it in absolute terms.
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-5, err_msg=f"{kind} {shape}")
        rel = np.max(np.abs(params - ref_params)) / np.max(np.abs(ref_params))
        print(f"{kind} mesh {shape}: max relative parameter difference {rel:.1e}")
        assert rel <= 1e-5, (kind, shape, rel)


def per_example_grads(model_def, params, batch):
    """∇ log π(y_i) for each example separately: the explicit side of the identities."""
    grad_one = jax.jit(jax.grad(lambda p, t, s, m: policy_logprobs(model_def, p, t, s, m)[0]))
    fields = ("tokens", "segment_ids", "loss_mask")
    return [grad_one(params, *(jnp.asarray(batch[f][i:i + 1]) for f in fields)) for i in range(N)]


def combine(grads, coefficients):
    return jax.tree.map(lambda *g: sum(c * x for c, x in zip(coefficients, g)), *grads)


def assert_trees_close(a, b, rtol=1e-4):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        scale = float(jnp.max(jnp.abs(y))) + 1e-12
        assert float(jnp.max(jnp.abs(x - y))) <= rtol * scale, (float(jnp.max(jnp.abs(x - y))), scale)


def test_sppo_gradient_at_log_ratio_zero_is_reinforce_with_win_rate_reward():
    model_def, state, _, _, _, _, logprobs = setup()
    batch = sppo_batch(logprobs, state.params)
    jbatch = {k: jnp.asarray(v) for k, v in batch.items()}
    grads = jax.grad(lambda p: sppo_objective(model_def, p, jbatch, eta=ETA)[0])(state.params)
    coefficients = -2 * ETA * (batch["win_rate"] - 0.5) / N
    assert_trees_close(grads, combine(per_example_grads(model_def, state.params, batch), coefficients))


def test_nash_md_pg_gradient_is_regularised_reinforce_per_example():
    model_def, state, _, _, _, _, logprobs = setup()
    batch = nash_md_batch(logprobs, state.params)
    jbatch = {k: jnp.asarray(v) for k, v in batch.items()}
    tau = 0.7
    grads = jax.grad(lambda p: nash_md_pg_objective(model_def, p, jbatch, tau=tau)[0])(state.params)
    logp = np.asarray(logprobs(state.params, batch))
    coefficients = -(batch["pref"] - 0.5 - tau * (logp - batch["ref_logp"])) / N
    assert_trees_close(grads, combine(per_example_grads(model_def, state.params, batch), coefficients))


@pytest.mark.parametrize("kind", ["sppo", "sppo_hard", "ipo", "nash_md"])
def test_four_micro_batches_equal_one_big_batch(kind):
    one_losses, one_params, _ = run_steps(kind, (2, 1, 1), steps=1)
    acc_losses, acc_params, _ = run_steps(kind, (2, 1, 1), steps=1, micro_batches=4)
    np.testing.assert_allclose(acc_losses, one_losses, rtol=1e-5)
    rel = np.max(np.abs(acc_params - one_params)) / np.max(np.abs(one_params))
    assert rel <= 1e-5, rel


def test_sppo_steps_lower_the_loss_and_move_log_ratios_towards_their_targets():
    model_def, state, shardings, mesh, tx, schedule, logprobs = setup()
    batch = sppo_batch(logprobs, state.params)
    batch["win_rate"] = np.where(np.arange(N) % 2 == 0, 0.9, 0.1).astype(np.float32)  # winners/losers
    step = make_sppo_step(model_def, tx, schedule, shardings, mesh, eta=5.0)  # targets ±2 nats
    losses = []
    for _ in range(15):
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    log_ratio = np.asarray(logprobs(state.params, batch)) - batch["anchor_logp"]
    assert losses[-1] < 0.5 * losses[0], losses
    assert np.all(log_ratio[::2] > 0.5) and np.all(log_ratio[1::2] < -0.5), log_ratio
    assert int(state.step) == 15 and metrics["skipped"] == 0.0


def test_pairwise_steps_start_from_their_hand_computed_values():
    model_def, state, shardings, mesh, tx, schedule, logprobs = setup()
    batch = pair_batch(logprobs, state.params)  # log-ratios 0
    beta = 0.1
    expected = {"dpo": np.log(2.0), "ipo": (0.5 / beta) ** 2, "sppo_hard": 2 * (0.5 / beta) ** 2}
    for loss, value in expected.items():
        _, fresh, shardings, mesh, tx, schedule, _ = setup()
        step = make_pair_step(model_def, tx, schedule, shardings, mesh, loss=loss, beta=beta)
        _, metrics = step(fresh, batch)
        assert float(metrics["loss"]) == pytest.approx(value, rel=1e-5), loss


def test_sppo_hard_raises_the_winner_and_lowers_the_loser():
    model_def, state, shardings, mesh, tx, schedule, logprobs = setup()
    batch = pair_batch(logprobs, state.params)
    step = make_pair_step(model_def, tx, schedule, shardings, mesh, loss="sppo_hard", beta=0.5)
    for _ in range(10):
        state, metrics = step(state, batch)
    log_ratio = np.asarray(logprobs(state.params, flatten_pairs(batch))).reshape(N, 2) \
        - batch["anchor_logp"]
    assert np.all(log_ratio[:, 0] > 0) and np.all(log_ratio[:, 1] < 0), log_ratio
    assert metrics["margin_positive"] == 1.0


def test_non_finite_batch_is_reported_and_not_applied():
    model_def, state, shardings, mesh, tx, schedule, logprobs = setup()
    batch = sppo_batch(logprobs, state.params)
    batch["anchor_logp"][3] = np.nan
    before = flat_params(state)
    step = make_sppo_step(model_def, tx, schedule, shardings, mesh, eta=ETA)
    state, metrics = step(state, batch)
    assert metrics["skipped"] == 1.0 and not np.isfinite(float(metrics["loss"]))
    np.testing.assert_array_equal(flat_params(state), before)
    assert int(state.step) == 0


def test_bad_batches_get_clear_errors():
    model_def, state, shardings, mesh, tx, schedule, logprobs = setup((8, 1, 1))
    step = make_sppo_step(model_def, tx, schedule, shardings, mesh, eta=ETA)
    good = sppo_batch(logprobs, state.params)
    with pytest.raises(ValueError, match=r"global batch of 4 examples .* does not divide over "
                                         r"data × fsdp = 8 devices"):
        step(state, {k: v[:4] for k, v in good.items()})
    with pytest.raises(ValueError, match=r"anchor_logp has shape \[6\] for 8 examples"):
        step(state, {**good, "anchor_logp": good["anchor_logp"][:6]})
    with pytest.raises(ValueError, match=r"missing \['win_rate'\]"):
        step(state, {k: v for k, v in good.items() if k != "win_rate"})
    with pytest.raises(ValueError, match=r"loss_mask has shape \[8, 11\] but tokens have \[8, 12\]"):
        step(state, {**good, "loss_mask": good["loss_mask"][:, 1:]})
    with pytest.raises(ValueError, match="micro_batches must be a positive integer"):
        make_sppo_step(model_def, tx, schedule, shardings, mesh, eta=ETA, micro_batches=0)
    with pytest.raises(ValueError, match="pairwise loss 'kto' is not one of"):
        make_pair_step(model_def, tx, schedule, shardings, mesh, loss="kto", beta=0.1)


@pytest.mark.parametrize("dtype, param_dtype", [("bfloat16", "float32"), ("bfloat16", "bfloat16")])
def test_mixed_precision_steps_keep_parameter_dtype_and_fp32_metrics(dtype, param_dtype):
    import dataclasses

    from flax import nnx

    from nash_jax.models.llama import Llama
    from nash_jax.train import OptimizerConfig, init_train_state, make_logprobs, make_optimizer
    from tests.train.conftest import CONFIG, mesh_of

    mesh = mesh_of((2, 1, 1))
    config = dataclasses.replace(CONFIG, dtype=dtype, param_dtype=param_dtype)
    tx, schedule = make_optimizer(OptimizerConfig(learning_rate=1e-3, warmup_ratio=0.0))
    model_def, state, shardings = init_train_state(Llama(config, rngs=nnx.Rngs(0)), tx, mesh=mesh)
    batch = sppo_batch(make_logprobs(model_def, mesh), state.params)
    step = make_sppo_step(model_def, tx, schedule, shardings, mesh, eta=5.0)
    state, metrics = step(state, batch)
    state, metrics = step(state, batch)
    assert metrics["loss"].dtype == jnp.float32 and np.isfinite(float(metrics["loss"]))
    assert metrics["skipped"] == 0.0
    assert {x.dtype for x in jax.tree.leaves(state.params)} == {jnp.dtype(param_dtype)}
