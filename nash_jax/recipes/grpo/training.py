"""GRPO's step for the online learner: K samples of π_θ for each of a step's prompts, their scalar
rewards, advantages within each prompt's group, the clipped policy-gradient update (k3 KL towards π_0,
which the learner supplies); `plan_step`, what `nash-jax plan` sizes."""

import numpy as np

from nash_jax import data, runs
from nash_jax.engine import prompt_sets
from nash_jax.engine.learner import OnlineLearner, OnlineRecipe, Rollout
from nash_jax.engine.plan import StepShape
from nash_jax.parallel.padding import round_up
from nash_jax.recipes.grpo.config import STAGE
from nash_jax.recipes.grpo.credit import group_credit, rollout_columns, step_batch
from nash_jax.rollout.sampling import generate, pad_id_of
from nash_jax.runs.keys import stage_key, stage_seed


def train(config, run, prompts, tokenizer, reward, mesh):
    """The training stage: grpo.steps updates on batches of `prompts` (texts), snapshots exported as
    RUN_DIR/iter_k/policy. reward: the run's judge, a RewardJudge (its `rewards`)."""
    g = config.grpo
    ids, kept, _ = prompt_sets.encode_prompts(config.data, tokenizer, prompts, "training prompts")
    if len(ids) < g.prompts_per_step:
        raise ValueError(f"{len(ids)} training prompts make no batch of grpo.prompts_per_step="
                         f"{g.prompts_per_step}; lower it or add prompts")
    shape, pad_id = plan_step(config), pad_id_of(tokenizer)
    epochs = -(-g.steps * g.prompts_per_step // len(ids))
    batches = iter(data.batches([(prompts[i], p) for i, p in zip(kept, ids)], g.prompts_per_step,
                                epochs=epochs, seed=stage_seed(config.seed, 0, "train"), drop_remainder=True))

    def rollout(learner, step, params, extra, item):
        texts, prompt_ids = (list(column) for column in zip(*item))
        samples = generate(learner.initial, prompt_ids, num_samples=g.samples_per_prompt, params=params,
                           key=stage_key(config.seed, 0, "generate", step), **learner.sampling(tokenizer))
        rollouts = rollout_columns(samples, texts, prompt_ids, tokenizer)
        try:
            rewards = reward.rewards(rollouts["prompt"], rollouts["response"])
        except ValueError as err:
            raise ValueError(f"scoring grpo step {step + 1}: {err}") from None
        advantages, degenerate = group_credit(rewards, g.samples_per_prompt, g.advantage)
        batch = step_batch(rollouts, advantages, pad_id, shape.rows, shape.length)
        runs.write_table(run / STAGE / "rollouts" / f"step_{step + 1}.parquet", {
            **{k: rollouts[k] for k in ("prompt", "response", "length")},
            "reward": rewards.tolist(), "advantage": batch["advantage"][:len(rewards)].tolist()})
        return Rollout(batch, {"reward_mean": float(rewards.mean()), "reward_std": float(rewards.std()),
                               "degenerate_share": degenerate,
                               "length_mean": float(np.mean(rollouts["length"])),
                               "finished_share": float(np.mean(rollouts["finished"]))})

    OnlineLearner(config, run, mesh).train(OnlineRecipe(
        stage=STAGE, steps=g.steps, shape=shape, rollout=rollout, snapshots=g.snapshots, batches=batches))


def plan_step(config):
    """One update: every rollout of a step (prompts_per_step × samples_per_prompt, which the mesh
    divides), the pg objective with π_0's log-probs (`pg_kl`, its KL logged at kl_coef = 0 too)."""
    g = config.grpo
    return StepShape("pg_kl", dict(clip_low=g.clip_low, clip_high=g.clip_high, aggregation=g.aggregation,
                                   max_len=config.sampling.max_new_tokens, kl_coef=g.kl_coef),
                     g.prompts_per_step * g.samples_per_prompt,
                     round_up(config.data.max_prompt_tokens + config.sampling.max_new_tokens, 8))
