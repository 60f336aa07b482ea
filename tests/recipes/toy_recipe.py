"""A recipe defined outside the package, to prove that a new recipe is one module: online REINFORCE on
the synthetic task against a scalar reward (1 for responses in the `witty` style), with a running-mean
baseline kept as checkpointed state and an objective of its own added to the step table. It supplies
only its rollout (sample, score, the batch) and its update's shape; the engine's online learner owns
the rest (π_0, the optimiser, the loop, checkpoints, snapshots).

A config runs it with `recipe: toy_reinforce` and `imports: [tests.recipes.toy_recipe]`.
"""

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from nash_jax import data, runs
from nash_jax.engine import policy_files, prompt_sets
from nash_jax.judges.base import RewardModel
from nash_jax.engine import Recipe, register
from nash_jax.engine import iterates_report
from nash_jax.engine.learner import OnlineLearner, OnlineRecipe, Rollout
from nash_jax.engine.plan import StepShape
from nash_jax.engine.preparation import prepare
from nash_jax.parallel.padding import bucket_size
from nash_jax.rollout.batches import token_batch
from nash_jax.rollout.sampling import generate, pad_id_of
from nash_jax.tasks.synthetic import synthetic
from nash_jax.train import Objective, objectives

STAGE = "toy"


@dataclass(frozen=True)
class ToyConfig:
    steps: int = 8
    prompts_per_step: int = 8
    style: str = "witty"
    baseline_decay: float = 0.5


class StyleReward(RewardModel):
    def __init__(self, style):
        self.style = style

    def _rewards(self, prompts, responses):
        return [float(synthetic.STYLES[synthetic.response_class(r)] == self.style
                      if synthetic.response_class(r) < len(synthetic.STYLES) else 0.0)
                for r in responses]


def reinforce(token_logp, mask, batch):
    """−mean(A · log π(y)): the plain score-function estimator."""
    logp = jnp.sum(token_logp, axis=-1)
    return -jnp.mean(batch["advantage"] * logp), {"logp": logp}


objectives.register(Objective("toy_reinforce", reinforce, {"advantage": ("N",)}))


def run_toy(config, run):
    toy = config.toy_reinforce
    mesh, tokenizer, splits, judge = prepare(config, run)
    reward = StyleReward(toy.style)
    if not run.done(STAGE):
        ids, kept, _ = prompt_sets.encode_prompts(config.data, tokenizer, splits.iterations[0], "toy prompts")
        texts = [splits.iterations[0][i] for i in kept]
        batches = iter(data.batches(list(zip(texts, ids)), toy.prompts_per_step, epochs=toy.steps,
                                    seed=runs.stage_seed(config.seed, 0, "train"), drop_remainder=True))

        def rollout(learner, step, params, extra, item):
            """What one step samples and scores, and the batch it trains on: the recipe's own part."""
            batch_texts, batch_ids = zip(*item)
            samples = generate(learner.initial, list(batch_ids), num_samples=1, params=params,
                               key=runs.stage_key(config.seed, 0, "toy_generate", step),
                               **learner.sampling(tokenizer))
            y_ids = [samples.tokens[b, 0, :samples.lengths[b, 0]].tolist() for b in range(len(batch_ids))]
            r = reward.rewards(list(batch_texts), [tokenizer.decode(y, skip_special_tokens=True)
                                                   for y in y_ids])
            baseline = float(extra["baseline"])
            batch = token_batch(batch_ids, y_ids, pad_id_of(tokenizer))
            batch["advantage"] = (r - baseline).astype(np.float32)
            new_baseline = toy.baseline_decay * baseline + (1 - toy.baseline_decay) * r.mean()
            return Rollout(batch, {"reward": float(r.mean())}, {"baseline": jnp.float32(new_baseline)})

        OnlineLearner(config, run, mesh).train(OnlineRecipe(
            stage=STAGE, steps=toy.steps, shape=plan_step(config), rollout=rollout, batches=batches,
            extra={"baseline": jnp.float32(0.0)},
            finish_info=lambda extra: {"baseline": float(extra["baseline"])}))
    metrics = runs.read_metrics(run / "metrics.jsonl")
    return iterates_report.evaluate_and_write(
        config, run, iterates=[("pi_0", policy_files.initial_policy_dir(config.model.path, run)),
                               ("pi_1", run / "iter_0" / "policy")],
        eval_prompts=splits.eval, tokenizer=tokenizer, judge=judge, mesh=mesh,
        iterations=[{"iteration": 0, **iterates_report.loss_curve(metrics, STAGE)}])


def plan_step(config):
    """One update: a response to each of a step's prompts (what `nash-jax plan` sizes)."""
    return StepShape("toy_reinforce", {}, config.toy_reinforce.prompts_per_step,
                     bucket_size(config.data.max_prompt_tokens + config.sampling.max_new_tokens, minimum=8))


register(Recipe(name="toy_reinforce", run=run_toy, section="toy_reinforce", section_type=ToyConfig,
                plan_step=plan_step,
                batch_sizes=lambda config: {"toy_reinforce.prompts_per_step":
                                            config.toy_reinforce.prompts_per_step}))
