"""The update steps: the same numbers on every mesh, the policy-gradient identities, accumulation,
progress on a fixed batch, and clear refusals of bad batches."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nash_jax.config import OptimizerConfig

from nash_jax.train import make_step
from nash_jax.train.steps import objective_loss, policy_logprobs
from nash_jax.train.objectives import OBJECTIVES
from tests.unit.train.conftest import CONFIG, MESHES, setup, token_batch

pytestmark = pytest.mark.long

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
        step = make_step("sppo", model_def, tx, schedule, shardings, mesh, eta=ETA,
                         micro_batches=micro_batches)
    elif kind == "nash_md":
        batch = nash_md_batch(logprobs, state.params)
        step = make_step("nash_md_pg", model_def, tx, schedule, shardings, mesh, tau=0.1,
                         micro_batches=micro_batches)
    else:
        batch = pair_batch(logprobs, state.params)
        step = make_step(kind, model_def, tx, schedule, shardings, mesh, beta=0.1,
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
    grads = jax.grad(lambda p: objective_loss(OBJECTIVES["sppo"], {"eta": ETA}, model_def, p, jbatch)[0])(state.params)
    coefficients = -2 * ETA * (batch["win_rate"] - 0.5) / N
    assert_trees_close(grads, combine(per_example_grads(model_def, state.params, batch), coefficients))


def test_nash_md_pg_gradient_is_regularised_reinforce_per_example():
    model_def, state, _, _, _, _, logprobs = setup()
    batch = nash_md_batch(logprobs, state.params)
    jbatch = {k: jnp.asarray(v) for k, v in batch.items()}
    tau = 0.7
    grads = jax.grad(lambda p: objective_loss(OBJECTIVES["nash_md_pg"], {"tau": tau}, model_def, p,
                                                jbatch)[0])(state.params)
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
    step = make_step("sppo", model_def, tx, schedule, shardings, mesh, eta=5.0)  # targets ±2 nats
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
        step = make_step(loss, model_def, tx, schedule, shardings, mesh, beta=beta)
        _, metrics = step(fresh, batch)
        assert float(metrics["loss"]) == pytest.approx(value, rel=1e-5), loss


def test_sppo_hard_raises_the_winner_and_lowers_the_loser():
    model_def, state, shardings, mesh, tx, schedule, logprobs = setup()
    batch = pair_batch(logprobs, state.params)
    step = make_step("sppo_hard", model_def, tx, schedule, shardings, mesh, beta=0.5)
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
    step = make_step("sppo", model_def, tx, schedule, shardings, mesh, eta=ETA)
    state, metrics = step(state, batch)
    assert metrics["skipped"] == 1.0 and not np.isfinite(float(metrics["loss"]))
    np.testing.assert_array_equal(flat_params(state), before)
    assert metrics["zero_gradient"] == 0.0, "a non-finite step is not a zero-gradient one"
    assert int(state.step) == 1, "a skipped step still moves the schedule on"


def test_a_batch_without_gradient_moves_nothing_after_adam_has_momentum():
    """Every advantage 0 (no row of a self-play step carries signal): Adam, one update into its run,
    would still move the parameters along its momentum; the step reports zero_gradient and keeps
    parameters and optimiser state (the step count, the schedule's position, moves on)."""
    model_def, state, shardings, mesh, tx, schedule, _ = setup()
    step = make_step("pg", model_def, tx, schedule, shardings, mesh, **PG)
    batch = pg_batch(model_def, state.params)
    state, metrics = step(state, batch)
    assert metrics["zero_gradient"] == 0.0 and int(state.step) == 1
    before = flat_params(state)
    moments = [np.asarray(x) for x in jax.tree.leaves(state.opt_state)]  # the state is donated
    state, metrics = step(state, {**batch, "advantage": np.zeros(N, np.float32)})
    assert float(metrics["grad_norm"]) == 0.0 and metrics["zero_gradient"] == 1.0
    assert metrics["skipped"] == 0.0 and int(state.step) == 2
    np.testing.assert_array_equal(flat_params(state), before)
    for ours, theirs in zip(jax.tree.leaves(state.opt_state), moments):
        np.testing.assert_array_equal(np.asarray(ours), theirs)


def test_the_schedule_ends_at_the_runs_last_step_with_signal_free_steps_between():
    """A run of 6 steps whose steps 2 and 4 carry no gradient: the learning rate follows the schedule
    step for step over all six (warm-up over 1, then linear decay), so the last step's rate is the
    schedule's last, as without the signal-free steps."""
    optimizer = OptimizerConfig(name="adamw", learning_rate=1e-3, warmup_ratio=0.2)
    model_def, state, shardings, mesh, tx, schedule, _ = setup(optimizer=optimizer, total_steps=6)
    step = make_step("pg", model_def, tx, schedule, shardings, mesh, **PG)
    batch = pg_batch(model_def, state.params)
    rates = []
    for i in range(6):
        advantage = np.zeros(N, np.float32) if i in (2, 4) else batch["advantage"]
        state, metrics = step(state, {**batch, "advantage": advantage})
        assert metrics["zero_gradient"] == float(i in (2, 4))
        rates.append(float(metrics["learning_rate"]))
    np.testing.assert_allclose(rates, [float(schedule(i)) for i in range(6)], rtol=1e-6)
    assert rates[-1] == pytest.approx(float(schedule(5))) and int(state.step) == 6


def test_bad_batches_get_clear_errors():
    model_def, state, shardings, mesh, tx, schedule, logprobs = setup((8, 1, 1))
    step = make_step("sppo", model_def, tx, schedule, shardings, mesh, eta=ETA)
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
        make_step("sppo", model_def, tx, schedule, shardings, mesh, eta=ETA, micro_batches=0)
    with pytest.raises(ValueError, match="objective 'kto' is not one of"):
        make_step("kto", model_def, tx, schedule, shardings, mesh, beta=0.1)


@pytest.mark.parametrize("dtype, param_dtype", [("bfloat16", "float32"), ("bfloat16", "bfloat16")])
def test_mixed_precision_steps_keep_parameter_dtype_and_fp32_metrics(dtype, param_dtype):
    import dataclasses

    from flax import nnx

    from nash_jax.models.llama import Llama
    from nash_jax.config import OptimizerConfig
    from nash_jax.train import init_train_state, make_logprobs, make_optimizer
    from tests.unit.train.conftest import CONFIG, mesh_of

    mesh = mesh_of((2, 1, 1))
    config = dataclasses.replace(CONFIG, dtype=dtype, param_dtype=param_dtype)
    tx, schedule = make_optimizer(OptimizerConfig(name="adamw", learning_rate=1e-3, warmup_ratio=0.0), 1000)
    model_def, state, shardings = init_train_state(Llama(config, rngs=nnx.Rngs(0)), tx, mesh=mesh)
    batch = sppo_batch(make_logprobs(model_def, mesh), state.params)
    step = make_step("sppo", model_def, tx, schedule, shardings, mesh, eta=5.0)
    state, metrics = step(state, batch)
    state, metrics = step(state, batch)
    assert metrics["loss"].dtype == jnp.float32 and np.isfinite(float(metrics["loss"]))
    assert metrics["skipped"] == 0.0
    assert {x.dtype for x in jax.tree.leaves(state.params)} == {jnp.dtype(param_dtype)}


def reference_loss(kind, model_def, params, batch, **hp):
    """The loss as the core functions define it, from sequence log-probs computed apart (the shape
    of the four step factories this table replaced)."""
    from nash_jax.core import losses

    fields = ("tokens", "segment_ids", "loss_mask")
    if kind in ("sppo_hard", "dpo", "ipo"):
        flat = [jnp.asarray(batch[f]).reshape(2 * N, -1) for f in fields]
        logp = policy_logprobs(model_def, params, *flat).reshape(N, 2)
        fn = {"sppo_hard": losses.sppo_hard_loss, "dpo": losses.dpo_loss, "ipo": losses.ipo_loss}[kind]
        a = batch["anchor_logp"]
        return fn(logp[:, 0], a[:, 0], logp[:, 1], a[:, 1], hp["beta"])
    if kind == "sft":
        logits, _ = model_def.merge(params)(batch["tokens"][:, :-1],
                                            segment_ids=batch["segment_ids"][:, :-1])
        mask = batch["loss_mask"][:, 1:]
        return -jnp.sum(losses.token_logprobs(logits, batch["tokens"][:, 1:], mask)) / jnp.sum(mask)
    logp = policy_logprobs(model_def, params, *(jnp.asarray(batch[f]) for f in fields))
    if kind == "sppo":
        return losses.sppo_loss(logp, batch["anchor_logp"], batch["win_rate"], hp["eta"])
    return losses.nash_md_pg_loss(logp, batch["ref_logp"], batch["pref"], hp["tau"])


@pytest.mark.parametrize("kind, hp", [("sppo", {"eta": ETA}), ("sppo_hard", {"beta": 0.1}),
                                      ("dpo", {"beta": 0.1}), ("ipo", {"beta": 0.1}),
                                      ("nash_md_pg", {"tau": 0.3}), ("sft", {})])
def test_every_objective_in_the_table_gives_the_core_losses_and_gradients(kind, hp):
    model_def, state, _, _, _, _, logprobs = setup()
    if kind in ("sppo_hard", "dpo", "ipo"):
        batch = pair_batch(logprobs, state.params)
        batch["anchor_logp"] = batch["anchor_logp"] - np.array([0.2, -0.1], np.float32)
    elif kind == "nash_md_pg":
        batch = nash_md_batch(logprobs, state.params)
    elif kind == "sft":
        batch = token_batch(N, seed=7)
    else:
        batch = sppo_batch(logprobs, state.params)
        batch["anchor_logp"] = batch["anchor_logp"] + 0.4
    jbatch = {k: jnp.asarray(v) for k, v in batch.items()}
    ours, ours_grads = jax.value_and_grad(
        lambda p: objective_loss(OBJECTIVES[kind], hp, model_def, p, jbatch)[0])(state.params)
    ref, ref_grads = jax.value_and_grad(lambda p: reference_loss(kind, model_def, p, jbatch, **hp))(
        state.params)
    assert abs(float(ours) - float(ref)) <= 1e-5 * max(1.0, abs(float(ref))), (float(ours), float(ref))
    assert_trees_close(ours_grads, ref_grads, rtol=1e-5)


def test_each_objective_names_itself_and_the_field_when_a_field_is_missing_or_mis_shaped():
    model_def, state, shardings, mesh, tx, schedule, logprobs = setup((2, 1, 1))
    good = {"sppo": sppo_batch(logprobs, state.params), "dpo": pair_batch(logprobs, state.params),
            "nash_md_pg": nash_md_batch(logprobs, state.params)}
    hp = {"sppo": {"eta": ETA}, "dpo": {"beta": 0.1}, "nash_md_pg": {"tau": 0.1}}
    for kind, batch in good.items():
        step = make_step(kind, model_def, tx, schedule, shardings, mesh, **hp[kind])
        for field in OBJECTIVES[kind].fields:
            with pytest.raises(ValueError, match=rf"{kind}_step: .*missing \['{field}'\]"):
                step.place(dict((k, v) for k, v in batch.items() if k != field))
            wrong = np.concatenate([batch[field], batch[field]], axis=-1)
            with pytest.raises(ValueError, match=rf"{kind}_step: {field} has shape"):
                step.place({**batch, field: wrong})
    with pytest.raises(ValueError, match=r"dpo_step: anchor_logp has shape \[8\]; expected 2 dimensions "
                                         r"\(\[N, 2\]\)"):
        make_step("dpo", model_def, tx, schedule, shardings, mesh, beta=0.1).place(
            {**good["dpo"], "anchor_logp": good["dpo"]["anchor_logp"][:, 0]})
    with pytest.raises(ValueError, match=r"objective 'sppo' takes hyperparameters \['eta'\]; got \['tau'\]"):
        make_step("sppo", model_def, tx, schedule, shardings, mesh, tau=0.1)


def test_asking_again_for_an_equal_step_reuses_the_compiled_one():
    """An iterative recipe asks for its step once per iteration, with a fresh optimiser of the same
    configuration and a freshly loaded model of the same architecture: no recompilation."""
    from nash_jax.config import OptimizerConfig
    from nash_jax.train import init_train_state, make_optimizer
    from nash_jax.models.llama import Llama
    from flax import nnx
    from tests.unit.train.conftest import CONFIG, mesh_of

    mesh = mesh_of((2, 1, 1))
    steps = []
    for seed in range(2):
        tx, schedule = make_optimizer(OptimizerConfig(name="adamw", learning_rate=1e-3), 7)
        model_def, state, shardings = init_train_state(Llama(CONFIG, rngs=nnx.Rngs(seed)), tx, mesh=mesh)
        step = make_step("sppo", model_def, tx, schedule, shardings, mesh, eta=ETA)
        batch = sppo_batch(make_logprobs_of(model_def, mesh), state.params)
        state, _ = step(state, batch)
        steps.append(step)
    assert steps[0] is steps[1] and steps[0].jitted._cache_size() == 1
    other = make_step("sppo", model_def, tx, schedule, shardings, mesh, eta=ETA / 2)
    assert other is not steps[0]


def make_logprobs_of(model_def, mesh):
    from nash_jax.train import make_logprobs
    return make_logprobs(model_def, mesh)


PG = {"clip_low": 0.2, "clip_high": 0.28, "aggregation": "seq-mean-token-sum", "max_len": None}


def behaviour_logp(model_def, params, batch, shift=0.0):
    """Per-token log-probs of `batch` under `params` aligned with tokens ([N, T], 0 at position 0),
    as a sampler returns them; `shift` moves them off the current policy."""
    from nash_jax.train.steps import token_logprobs

    logp, mask = token_logprobs(model_def, params, *(jnp.asarray(batch[f]) for f in
                                                     ("tokens", "segment_ids", "loss_mask")))
    logp = np.asarray(jnp.where(mask, logp + shift, 0.0))
    return np.concatenate([np.zeros((logp.shape[0], 1), np.float32), logp], axis=1)


def pg_batch(model_def, params, shift=0.0, seed=8):
    batch = token_batch(N, seed=seed)
    batch["behaviour_logp"] = behaviour_logp(model_def, params, batch, shift)
    batch["advantage"] = np.random.default_rng(seed).normal(size=N).astype(np.float32)
    return batch


def test_pg_at_ratio_one_is_the_reinforce_gradient_per_example():
    model_def, state, _, _, _, _, _ = setup()
    batch = pg_batch(model_def, state.params)
    jbatch = {k: jnp.asarray(v) for k, v in batch.items()}
    grads = jax.grad(lambda p: objective_loss(OBJECTIVES["pg"], PG, model_def, p, jbatch)[0])(
        state.params)
    coefficients = -batch["advantage"] / N  # seq-mean-token-sum: mean over sequences of Σ_t
    assert_trees_close(grads, combine(per_example_grads(model_def, state.params, batch), coefficients))


def test_pg_tokens_whose_clip_binds_carry_no_gradient():
    model_def, state, _, _, _, _, _ = setup()
    batch = pg_batch(model_def, state.params, shift=-1.0)  # ratio e > 1 + ε everywhere
    batch["advantage"] = np.abs(batch["advantage"]) + 0.1  # positive: the upper clip binds
    jbatch = {k: jnp.asarray(v) for k, v in batch.items()}
    loss, metrics = objective_loss(OBJECTIVES["pg"], PG, model_def, state.params, jbatch)
    grads = jax.grad(lambda p: objective_loss(OBJECTIVES["pg"], PG, model_def, p, jbatch)[0])(
        state.params)
    assert float(metrics["clip_fraction"]) == 1.0
    assert max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(grads)) == 0.0


def run_pg_steps(shape, micro_batches=1, epochs=3, kl=False):
    # SGD: Adam turns rounding-level differences in near-zero gradients into whole steps
    from nash_jax.config import OptimizerConfig
    sgd = OptimizerConfig(name="sgd", learning_rate=0.5, warmup_ratio=0.0)
    model_def, state, shardings, mesh, tx, schedule, _ = setup(shape, optimizer=sgd)
    batch = pg_batch(model_def, state.params)
    name, hp = ("pg_kl", {**PG, "kl_coef": 0.05}) if kl else ("pg", PG)
    if kl:
        batch["ref_logp"] = behaviour_logp(model_def, state.params, batch, shift=0.3)
    step = make_step(name, model_def, tx, schedule, shardings, mesh, micro_batches=micro_batches, **hp)
    history = []
    for _ in range(epochs):  # several epochs over one batch of samples
        state, metrics = step(state, batch)
        history.append({k: float(v) for k, v in metrics.items()})
    return history, flat_params(state)


def test_pg_steps_agree_on_every_mesh_and_with_micro_batches():
    ref_history, ref_params = run_pg_steps((1, 1, 1), kl=True)
    assert ref_history[0]["ratio_mean"] == pytest.approx(1.0, abs=1e-5)  # fresh samples: ratio 1
    assert ref_history[0]["kl"] > 0 and ref_history[-1]["ratio_mean"] != pytest.approx(1.0, abs=1e-6)
    assert {"clip_fraction", "kl", "entropy", "advantage_mean", "advantage_std"} <= set(ref_history[0])
    for shape, micro in (((8, 1, 1), 1), ((2, 2, 2), 1), ((2, 1, 1), 4)):
        history, params = run_pg_steps(shape, micro_batches=micro, kl=True)
        np.testing.assert_allclose([h["loss"] for h in history], [h["loss"] for h in ref_history],
                                   rtol=1e-5, atol=1e-6, err_msg=f"{shape} × {micro} micro-batches")
        rel = np.max(np.abs(params - ref_params)) / np.max(np.abs(ref_params))
        assert rel <= 1e-5, (shape, micro, rel)


@pytest.mark.parametrize("temperature", [0.7, 1.3])
def test_pg_on_fresh_samples_at_a_temperature_starts_at_ratio_one(temperature):
    """Responses the sampler drew at temperature T, with its log-probs as the behaviour: the tempered
    `pg` step sees ratio 1 and clips nothing on the first epoch. Trained untempered (T = 1 in the
    step) the same samples start off-policy (a random tiny model's logits are too flat for the clip
    to bind; SmolLM2's at 0.7 clipped 58 % of tokens)."""
    from nash_jax.rollout.batches import pg_batch as rollout_pg_batch
    from nash_jax.rollout.sampling import generate

    model_def, state, shardings, mesh, tx, schedule, _ = setup()
    prompts = [list(np.random.default_rng(i).integers(3, CONFIG.vocab_size, 4 + i % 3)) for i in range(4)]
    samples = generate(model_def.merge(state.params), prompts, num_samples=2, key=jax.random.key(3),
                       mesh=mesh, max_new_tokens=6, temperature=temperature, pad_id=0,
                       eos_token_ids=[1])
    rows = [(p, samples.tokens[b, k, :samples.lengths[b, k]].tolist(),
             samples.logprobs[b, k, :samples.lengths[b, k]].tolist())
            for b, p in enumerate(prompts) for k in range(2)]
    advantages = np.random.default_rng(0).normal(size=len(rows)).astype(np.float32)
    batch = rollout_pg_batch(*zip(*rows), advantages, pad_id=0, rows=8)
    first = {}
    for trained_at in (temperature, 1.0):
        step = make_step("pg", model_def, tx, schedule, shardings, mesh,
                         sampling_temperature=trained_at, **PG)
        _, metrics = step(jax.tree.map(lambda x: x.copy(), state), batch)
        first[trained_at] = {k: float(v) for k, v in metrics.items()}
    assert first[temperature]["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert first[temperature]["clip_fraction"] == 0.0
    assert abs(first[1.0]["ratio_mean"] - 1.0) > 1e-3
