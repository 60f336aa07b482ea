"""Optimisers and schedules against the PyTorch/transformers code the official SPPO trainer runs."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
import transformers

from nash_jax.config import OptimizerConfig
from nash_jax.train import learning_rate_schedule, make_optimizer
from nash_jax.train.optim import descent


@pytest.mark.parametrize("schedule, hf_name", [("linear", "linear"), ("cosine", "cosine")])
def test_schedule_matches_transformers_step_for_step(schedule, hf_name):
    config = OptimizerConfig(learning_rate=5e-7, schedule=schedule, warmup_ratio=0.1)
    ours = learning_rate_schedule(config, 37)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=config.learning_rate)
    hf = transformers.get_scheduler(hf_name, opt, num_warmup_steps=4, num_training_steps=37)
    for step in range(37):
        assert float(ours(step)) == pytest.approx(hf.get_last_lr()[0], rel=1e-5, abs=1e-14), step
        opt.step()
        hf.step()


def run_both(config, torch_optimizer, steps=6):
    """The same quadratic problem with a matrix and a vector parameter, optimised by both."""
    rng = np.random.default_rng(0)
    matrix, vector = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=4).astype(np.float32)
    target = rng.normal(size=(3, 4)).astype(np.float32)

    def loss(p):
        return jnp.sum((p["matrix"] - target) ** 2) + jnp.sum(p["vector"] ** 4)

    params = {"matrix": jnp.asarray(matrix), "vector": jnp.asarray(vector)}
    tx, schedule = make_optimizer(config, steps)
    state = tx.init(params)
    for step in range(steps):
        direction, state = tx.update(jax.grad(loss)(params), state, params)
        params = optax.apply_updates(params, descent(direction, schedule(step)))

    t_matrix, t_vector = (torch.nn.Parameter(torch.from_numpy(x.copy())) for x in (matrix, vector))
    opt = torch_optimizer([{"params": [t_matrix], "weight_decay": config.weight_decay},
                           {"params": [t_vector], "weight_decay": 0.0}])
    for _ in range(steps):
        opt.zero_grad()
        value = ((t_matrix - torch.from_numpy(target)) ** 2).sum() + (t_vector ** 4).sum()
        value.backward()
        opt.step()
    return params, {"matrix": t_matrix.detach().numpy(), "vector": t_vector.detach().numpy()}


def test_rmsprop_matches_torch_rmsprop():
    config = OptimizerConfig(name="rmsprop", learning_rate=1e-2, schedule="constant", warmup_ratio=0.0,
                             clip_norm=None, weight_decay=0.01)
    ours, theirs = run_both(config, lambda groups: torch.optim.RMSprop(groups, lr=1e-2, alpha=0.99,
                                                                       eps=1e-8))
    for name in ours:
        np.testing.assert_allclose(np.asarray(ours[name]), theirs[name], rtol=1e-5, atol=1e-6)


def test_adamw_matches_torch_adamw_with_decay_on_matrices_only():
    config = OptimizerConfig(name="adamw", learning_rate=1e-2, schedule="constant", warmup_ratio=0.0,
                             clip_norm=None, weight_decay=0.1)
    ours, theirs = run_both(config, lambda groups: torch.optim.AdamW(groups, lr=1e-2, eps=1e-8))
    for name in ours:
        np.testing.assert_allclose(np.asarray(ours[name]), theirs[name], rtol=1e-5, atol=1e-6)


def test_global_norm_clipping_bounds_the_first_update():
    config = OptimizerConfig(name="sgd", learning_rate=1.0, schedule="constant", warmup_ratio=0.0,
                             clip_norm=0.5)
    tx, _ = make_optimizer(config, 1)
    grads = {"a": jnp.full(4, 10.0)}
    updates, _ = tx.update(grads, tx.init(grads))
    assert float(optax.tree.norm(updates)) == pytest.approx(0.5, rel=1e-6)


def test_the_default_optimizer_is_the_official_sppo_recipe():
    o = OptimizerConfig()
    assert (o.name, o.learning_rate, o.schedule, o.warmup_ratio, o.weight_decay, o.clip_norm) == \
        ("rmsprop", 5e-7, "linear", 0.1, 0.0, 1.0)


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "lion"}, "train.optimizer.name"),
    ({"schedule": "step"}, "train.optimizer.schedule"),
    ({"warmup_ratio": 1.5}, r"warmup_ratio=1.5; expected \[0, 1\)"),
])
def test_bad_optimizer_configs_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        OptimizerConfig(**kwargs)


def test_a_schedule_over_no_steps_is_refused():
    with pytest.raises(ValueError, match="a schedule over 0 steps; expected at least 1"):
        make_optimizer(OptimizerConfig(), 0)
