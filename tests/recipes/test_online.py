"""Every online recipe trains through the shared online layer (engine/learner.py), so that each
`train.*` field reaches its step and its loop: the layer's step factory and loop are replaced by spies
that record what they were given (the factory still builds the real step) and stop the run before its
first online step (the warm start's fit is skipped too: π_0 is the freshly initialised model, which is
all the set-up needs); `nash-jax plan` is checked against the compiled memory of that real step.
SPPO, which trains offline through engine/loop.fit_rows, is held to the same fields."""

import numpy as np
import pytest

from nash_jax import engine
from nash_jax.config import load_config
from nash_jax.engine import loop
from nash_jax.engine import learner as online
from nash_jax.engine import planning
from nash_jax.engine import preparation
from nash_jax.engine import plan
from tests.recipes import (test_ssr_recipe, test_game_selfplay_recipe,
                           test_proposer_solver_recipe)
from tests.recipes.conftest import CONFIGS, small_config

# Values no recipe uses by default, each of which a recipe that bypassed the layer would lose.
FIELDS = ["train.micro_batches=2", "train.logprob_chunk=8", "train.max_skipped_fraction=0.25"]


OBJECTIVES = {"nash_md": lambda c: "nash_md_pg", "grpo": lambda c: "pg_kl",
              "proposer_solver": lambda c: "pg_kl" if c.proposer_solver.kl_coef else "pg",
              "game_selfplay": lambda c: "pg_kl" if c.game_selfplay.kl_coef else "pg",
              "ssr": lambda c: "pg_kl" if c.ssr.kl_coef else "pg"}
HYPERPARAMETERS = {  # each recipe's step, from its config section
    "nash_md": lambda c: {"tau": c.nash_md.tau},
    "proposer_solver": lambda c: {
        "clip_low": c.proposer_solver.clip_low, "clip_high": c.proposer_solver.clip_high,
        "aggregation": c.proposer_solver.aggregation, "kl_coef": c.proposer_solver.kl_coef,
        "max_len": max(c.proposer_solver.proposer_max_tokens, c.proposer_solver.solver_max_tokens)},
    "game_selfplay": lambda c: {
        "clip_low": c.game_selfplay.clip_low, "clip_high": c.game_selfplay.clip_high,
        "aggregation": c.game_selfplay.aggregation, "max_len": c.sampling.max_new_tokens,
        **({"kl_coef": c.game_selfplay.kl_coef} if c.game_selfplay.kl_coef else {})},
    "grpo": lambda c: {"clip_low": c.grpo.clip_low, "clip_high": c.grpo.clip_high,
                       "aggregation": c.grpo.aggregation, "max_len": c.sampling.max_new_tokens,
                       "kl_coef": c.grpo.kl_coef},
    "ssr": lambda c: {
        "clip_low": c.ssr.clip_low, "clip_high": c.ssr.clip_high,
        "aggregation": c.ssr.aggregation,
        "max_len": max(c.ssr.injector_max_tokens, c.ssr.solver_max_tokens),
        **({"kl_coef": c.ssr.kl_coef} if c.ssr.kl_coef else {})},
}


class Stopped(Exception):
    pass


def configs(tmp_path):
    return {
        "nash_md": small_config(tmp_path, base="nash_md_demo", name="nmd", nash_md={"prompts_per_step": 16}),
        "proposer_solver": test_proposer_solver_recipe.tiny_config(tmp_path),
        "game_selfplay": test_game_selfplay_recipe.tiny_config(tmp_path),
        "grpo": small_config(tmp_path, base="grpo_demo", name="grpo",
                             grpo={"prompts_per_step": 8, "samples_per_prompt": 2}),
        "ssr": test_ssr_recipe.tiny_config(tmp_path),
    }


CASES = {"nash_md": ("nash_md", []), "proposer_solver": ("proposer_solver", []),
         "game_selfplay": ("game_selfplay", []),
         "game_selfplay_without_kl": ("game_selfplay", ["game_selfplay.kl_coef=0"]), "grpo": ("grpo", []),
         # 2 repositories × 2 injectors × (1 + 3 solvers) = 16 rows: two micro-batches over 8 devices
         "ssr": ("ssr", ["ssr.solvers_per_artifact=3"])}


@pytest.fixture(scope="module", params=list(CASES))
def started(request, tmp_path_factory):
    """(config, what the layer's step factory and loop were given, the real Step it built, the train
    state) of one recipe run up to its first online step; shared by the tests below."""
    recipe, extra = CASES[request.param]
    tmp_path = tmp_path_factory.mktemp(request.param)
    seen, built, real_make_step = {}, {}, online.make_step

    def make_step(objective, *args, micro_batches, logprob_chunk, sampling_temperature,
                  **hyperparameters):
        seen.update(objective=objective, hyperparameters=hyperparameters, micro_batches=micro_batches,
                    logprob_chunk=logprob_chunk, sampling_temperature=sampling_temperature)
        built["step"] = real_make_step(objective, *args, micro_batches=micro_batches,
                                       logprob_chunk=logprob_chunk,
                                       sampling_temperature=sampling_temperature, **hyperparameters)
        return built["step"]

    def train_loop(run, stage, *, state, max_skipped_fraction, checkpoint_every, **kwargs):
        seen.update(max_skipped_fraction=max_skipped_fraction, checkpoint_every=checkpoint_every)
        built["state"] = state
        raise Stopped

    config = load_config(configs(tmp_path)[recipe], [f"run_dir={tmp_path / 'run'}", *FIELDS,
                                                     "train.checkpoint_every=3", *extra])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(preparation, "fit_rows", lambda run, stage, model, rows, **kwargs: model)
        patch.setattr(online, "make_step", make_step)
        patch.setattr(online, "train_loop", train_loop)
        with pytest.raises(Stopped):
            engine.run(config)
    return config, seen, built["step"], built["state"]


def test_every_online_recipe_honours_the_train_fields(started):
    config, seen, _, _ = started
    recipe = config.recipe
    assert seen == {"objective": OBJECTIVES[recipe](config), "hyperparameters": HYPERPARAMETERS[recipe](config),
                    "micro_batches": 2, "logprob_chunk": 8, "max_skipped_fraction": 0.25,
                    "checkpoint_every": 3, "sampling_temperature": config.sampling.temperature}, seen
    planned = planning.plan_inputs(config).step  # what `nash-jax plan` sizes is the step that runs
    assert (planned.objective, planned.hyperparameters) == (seen["objective"], seen["hyperparameters"])


def test_plan_is_the_compiled_memory_of_each_online_recipes_own_step(started):
    """`nash-jax plan` compiles its step on abstract arrays; here the step the recipe really built
    (its loaded policy, optimiser, train state and shardings, with the non-default train fields) is
    compiled on real arrays of the planned batch: the two memory analyses must agree exactly."""
    config, _, step, state = started
    result = planning.plan(config)
    planned = planning.plan_inputs(config).step
    shapes = plan.abstract_batch(planned.objective, planned.rows, planned.length, step.mesh)
    batch = step.place_global({f: np.zeros(s.shape, s.dtype) for f, s in shapes.items()})
    expected = plan.compiled_memory(step.jitted.lower(state, batch).compile())
    assert result["compiled"] == expected, (result["compiled"], expected)
    assert result["devices"] == step.mesh.devices.size and result["micro_batches"] == 2


def test_sppo_honours_the_train_fields(tmp_path, monkeypatch):
    """SPPO trains offline (engine/loop.fit_rows), not through the online layer: the same fields must
    reach the step factory and the loop fit_rows calls (the warm start's own fit is skipped)."""
    seen = {}

    def make_step(objective, *args, micro_batches, logprob_chunk, **hyperparameters):
        seen.update(objective=objective, hyperparameters=hyperparameters, micro_batches=micro_batches,
                    logprob_chunk=logprob_chunk)
        return object()  # never called: the loop stops first

    def train_loop(run, stage, *, max_skipped_fraction, checkpoint_every, **kwargs):
        seen.update(stage=stage, max_skipped_fraction=max_skipped_fraction, checkpoint_every=checkpoint_every)
        raise Stopped

    monkeypatch.setattr(preparation, "fit_rows", lambda run, stage, model, rows, **kwargs: model)
    monkeypatch.setattr(loop, "make_step", make_step)
    monkeypatch.setattr(loop, "train_loop", train_loop)
    config = load_config(small_config(tmp_path, name="sppo_fields"),
                         [f"run_dir={tmp_path / 'run'}", *FIELDS, "train.batch_size=16",
                          "train.checkpoint_every=3"])
    with pytest.raises(Stopped):
        engine.run(config)
    assert seen == {"objective": "sppo", "hyperparameters": {"eta": config.sppo.eta}, "micro_batches": 2,
                    "logprob_chunk": 8, "stage": "iter_0", "max_skipped_fraction": 0.25,
                    "checkpoint_every": 3}, seen


@pytest.mark.parametrize("name, objective, rows, length", [
    ("demo", "sppo", 32, 64), ("nash_md_demo", "nash_md_pg", 32, 64), ("kuhn_demo", "pg_kl", 192, 40),
    ("proposer_solver_demo", "pg_kl", 80, 80), ("proposer_solver_document", "pg", 80, 88),
    ("grpo_demo", "pg_kl", 64, 48)])
def test_plan_sizes_each_shipped_recipes_own_step(name, objective, rows, length):
    """`nash-jax plan` on every shipped demo: its recipe's objective, rows and tokens per update,
    built-in models included (the Kuhn demo's is the games tokenizer's; 64 games × 3 turns at most =
    192, of data.max_prompt_tokens 32 + 4 new tokens, rounded up to 40: the online recipes' batches
    are padded to the planned width, a multiple of 8)."""
    config = load_config(CONFIGS / f"{name}.yaml")
    result = planning.plan(config, devices=1, compile_step=False)
    assert (result["objective"], result["batch_size"], result["length"]) == (objective, rows, length), result
    assert result["parameters_count"] > 0 and "builtin:" in result["model"]
