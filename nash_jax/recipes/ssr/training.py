"""SSR's step for the online learner: `plan_step` (which `nash-jax plan` sizes too), one round on the
step's repositories, its credit and batch, and the anchors every `anchors.eval_every` steps."""

from nash_jax.engine.learner import OnlineLearner, OnlineRecipe, Rollout, pg_step_shape
from nash_jax.recipes.ssr.anchors import evaluate_anchors
from nash_jax.recipes.ssr.config import ANCHOR_STAGE, STAGE, rows_per_step
from nash_jax.recipes.ssr.credit import learner_rows
from nash_jax.recipes.ssr.rounds import play
from nash_jax.rollout.sampling import pad_id_of
from nash_jax.runs.keys import stage_key
from nash_jax.selfplay.two_role import rows_batch


def train(config, run, task, game):
    b, a = config.ssr, config.ssr.anchors
    shape = plan_step(config)
    pad_id, capacity = pad_id_of(game.tokenizer), rows_per_step(b)

    def anchors(learner, step, params, extra):
        return evaluate_anchors(config, game, task, learner.policy(params), run, step), extra

    def rollout(learner, step, params, extra, item):
        sandbox_before = game.sandbox_s
        rng = learner.host_rng(step, "repositories")
        chosen = [task.train[i] for i in rng.choice(len(task.train), size=b.repositories_per_step,
                                                    replace=len(task.train) < b.repositories_per_step)]
        rnd = play(config, game, chosen, learner.policy(params), step,
                   inject_key=stage_key(config.seed, 0, "inject", step),
                   solve_key=stage_key(config.seed, 0, "repair", step), crash_prefix=STAGE)
        rows, info = learner_rows(config, rnd, capacity)
        return Rollout(rows_batch(rows, pad_id, capacity, shape.length),
                       {**info, "sandbox_s": game.sandbox_s - sandbox_before})

    OnlineLearner(config, run, game.mesh).train(OnlineRecipe(
        stage=STAGE, steps=b.steps, shape=shape, rollout=rollout, snapshots=b.snapshots,
        evaluate=anchors, eval_every=a.eval_every, eval_stage=ANCHOR_STAGE))


def plan_step(config):
    """One update: every rollout of a step (rows_per_step), with a k3 KL to π_0 when kl_coef > 0."""
    b = config.ssr
    longest = max(b.injector_max_tokens, b.solver_max_tokens)
    return pg_step_shape(b, rows=rows_per_step(b), max_len=longest, prompt_tokens=config.data.max_prompt_tokens)
