"""The online learner (engine/learner.py) owns the step skeleton: each rule it holds once for every
online recipe, on a tiny Llama exported as a Hugging Face directory and a batch built by hand."""

import jax
import numpy as np
import pytest
from flax import nnx

from nash_jax.config import load_config, to_dict
from nash_jax.engine.learner import (OnlineLearner, OnlineRecipe, Rollout, merge_epochs, pg_step_shape,
                                     reference_logprobs)
from nash_jax.models.export import export_policy
from nash_jax.models.llama import Llama, LlamaConfig
from nash_jax.parallel import make_mesh
from nash_jax.rollout.batches import pg_batch
from nash_jax.runs import RunDir, read_metrics
from nash_jax.tasks.synthetic import synthetic
from tests.recipes.conftest import CONFIGS

ROWS, PROMPT, RESPONSE = 8, 4, 4
LLAMA = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                    num_kv_heads=2, head_dim=8)


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("policy") / "pi0"
    export_policy(Llama(LLAMA, rngs=nnx.Rngs(0)), path, synthetic.TOKENIZER_DIR, in_run=False)
    return path


def learner_for(tmp_path, policy_dir, *overrides, run="run"):
    """An OnlineLearner of a game_selfplay config (a pg_kl update) on the tiny policy, one device."""
    config = load_config(CONFIGS / "kuhn_demo.yaml", [f"model.path={policy_dir}", f"run_dir={tmp_path / run}",
                                                     "game_selfplay.kl_coef=0.1", *overrides])
    run_dir = RunDir(tmp_path / run)
    run_dir.acquire()
    run_dir.lock_config(to_dict(config))
    mesh = make_mesh(1, 1, 1, devices=jax.devices()[:1])
    return OnlineLearner(config, run_dir, mesh), config


def recipe_of(config, steps=4, rollout=None, **fields):
    g = config.game_selfplay
    shape = pg_step_shape(g, rows=ROWS, max_len=RESPONSE, prompt_tokens=PROMPT)
    return OnlineRecipe(stage="toy", steps=steps, shape=shape, rollout=rollout or fixed_rollout, **fields)


def batch(seed=0, advantage=None):
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(3, 60, PROMPT).tolist() for _ in range(ROWS)]
    responses = [rng.integers(3, 60, RESPONSE).tolist() for _ in range(ROWS)]
    behaviour = [np.full(RESPONSE, -4.0, np.float32) for _ in range(ROWS)]
    adv = rng.normal(size=ROWS).astype(np.float32) if advantage is None else advantage
    return pg_batch(prompts, responses, behaviour, adv, pad_id=0, rows=ROWS, width=PROMPT + RESPONSE)


def fixed_rollout(learner, step, params, extra, item):
    return Rollout(batch(step), {"step_seen": float(step)})


def flat(params):
    return np.concatenate([np.ravel(x) for x in jax.tree.leaves(jax.device_get(params))])


def test_an_empty_batch_trains_nothing_and_moves_the_schedule_on_by_the_epochs(tmp_path, policy_dir):
    learner, _ = learner_for(tmp_path, policy_dir, "train.epochs=3")
    learner.build(recipe_of(learner.config))
    before = flat(learner.state.params)
    state, metrics = learner.update(learner.state, None)
    assert metrics == {"empty_batch": 1.0}
    assert int(state.step) == 3, "the schedule counts the step's three updates, applied or not"
    np.testing.assert_array_equal(flat(state.params), before)


def test_train_epochs_are_the_updates_on_each_steps_batch(tmp_path, policy_dir):
    learner, _ = learner_for(tmp_path, policy_dir, "train.epochs=3")
    learner.build(recipe_of(learner.config))
    state, metrics = learner.update(learner.state, batch())
    assert int(state.step) == 3 and metrics["empty_batch"] == 0.0 and float(metrics["skipped"]) == 0.0


def test_a_skipped_earlier_epoch_counts_as_a_skipped_step():
    """The loop counts a step as skipped (train.max_skipped_fraction) when its `skipped` is > 0: an
    earlier epoch that was not finite must show, not only the last epoch's figure."""
    epochs = [{"loss": np.float32(np.nan), "skipped": np.float32(1), "zero_gradient": np.float32(0)},
              {"loss": np.float32(0.5), "skipped": np.float32(0), "zero_gradient": np.float32(0)}]
    merged = merge_epochs(epochs)
    assert float(merged["skipped"]) == 0.5 and float(merged["loss"]) == 0.5


def test_a_batch_that_is_not_finite_is_skipped_in_every_epoch(tmp_path, policy_dir):
    learner, _ = learner_for(tmp_path, policy_dir, "train.epochs=2")
    learner.build(recipe_of(learner.config))
    before = flat(learner.state.params)
    state, metrics = learner.update(learner.state, batch(advantage=np.full(ROWS, np.nan, np.float32)))
    assert float(metrics["skipped"]) == 1.0 and int(state.step) == 2
    np.testing.assert_array_equal(flat(state.params), before)


def test_pi0_logprobs_come_from_the_loaded_weights_before_and_after_a_resume(tmp_path, policy_dir):
    """The KL's π_0 is the initial policy's: after training (parameters moved) and in a learner that
    resumes the run from its checkpoint, ref_logp of a batch is what it was before the first step."""
    b = batch(seed=7)
    first, config = learner_for(tmp_path, policy_dir, "train.checkpoint_every=2")
    first.build(recipe_of(config))
    before = first.reference(first.step_fn, b)
    state, _ = first.train(recipe_of(config, steps=4))
    trained = reference_logprobs(first.model_def, state.params, first.mesh, config.sampling.temperature)
    assert not np.allclose(trained(first.step_fn, b), before), "training moved the policy"
    np.testing.assert_array_equal(first.reference(first.step_fn, b), before)
    first.run_dir.close()
    resumed, _ = learner_for(tmp_path, policy_dir, "train.checkpoint_every=2", run="run")
    resumed.build(recipe_of(config, steps=6))
    np.testing.assert_array_equal(resumed.reference(resumed.step_fn, b), before)


def test_the_learner_logs_evaluations_at_their_cadence_and_at_the_end(tmp_path, policy_dir):
    learner, config = learner_for(tmp_path, policy_dir)
    seen = []

    def evaluate(learner, step, params, extra):
        seen.append(step)
        return {"figure": float(step)}, extra

    learner.train(recipe_of(config, steps=4, evaluate=evaluate, eval_every=2, eval_stage="toy_eval",
                            snapshots=2))
    assert seen == [0, 2, 4]
    logged = [m["step"] for m in read_metrics(tmp_path / "run" / "metrics.jsonl") if m["stage"] == "toy_eval"]
    assert logged == [0, 2, 4]
    assert all((tmp_path / "run" / f"iter_{k}" / "policy" / "config.json").is_file() for k in (0, 1))
