"""A recipe defined outside the package, to prove that a new recipe is one module: online REINFORCE on
the synthetic task against a scalar reward (1 for responses in the `witty` style), with a running-mean
baseline kept as checkpointed state and an objective of its own added to the step table.

A config runs it with `recipe: toy_reinforce` and `imports: [tests.recipes.toy_recipe]`.
"""

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from nash_jax import data, runs
from nash_jax.setup import components
from nash_jax.judges.base import RewardModel
from nash_jax.recipes import Recipe, iterates_report, register
from nash_jax.recipes.loop import train_loop
from nash_jax.setup.components import optimizer_config
from nash_jax.recipes.preparation import prepare
from nash_jax.rollout.batches import token_batch
from nash_jax.rollout.sampling import eos_ids_of, generate, pad_id_of
from nash_jax.tasks.synthetic import synthetic
from nash_jax.train import Objective, init_train_state, make_optimizer, make_step
from nash_jax.train import objectives

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
    mesh, tokenizer, splits, judge = prepare(config, run,
                                             batch_sizes={"toy_reinforce.prompts_per_step": toy.prompts_per_step})
    reward = StyleReward(toy.style)
    if not run.done(STAGE):
        ids, kept, _ = components.encode_prompts(config.data, tokenizer, splits.iterations[0], "toy prompts")
        texts = [splits.iterations[0][i] for i in kept]
        initial_dir = components.initial_policy_dir(config.model.path, run)
        initial = components.load_policy(initial_dir, config.model, mesh)
        tx, schedule = make_optimizer(optimizer_config(config.train.optimizer, toy.steps))
        model_def, state, shardings = init_train_state(initial, tx, mesh=mesh, seed=config.seed)
        step_fn = make_step("toy_reinforce", model_def, tx, schedule, shardings, mesh)
        batches = iter(data.batches(list(zip(texts, ids)), toy.prompts_per_step, epochs=toy.steps,
                                    seed=runs.stage_seed(config.seed, 0, "train"), drop_remainder=True))

        def work(step, state, extra, item):
            batch_texts, batch_ids = zip(*item)
            samples = generate(model_def.merge(state.params), list(batch_ids), num_samples=1,
                               max_new_tokens=config.sampling.max_new_tokens,
                               eos_token_ids=eos_ids_of(tokenizer), pad_id=pad_id_of(tokenizer),
                               key=runs.stage_key(config.seed, 0, "toy_generate", step), mesh=mesh)
            y_ids = [samples.tokens[b, 0, :samples.lengths[b, 0]].tolist() for b in range(len(batch_ids))]
            r = reward.rewards(list(batch_texts), [tokenizer.decode(y, skip_special_tokens=True)
                                                   for y in y_ids])
            baseline = float(extra["baseline"])
            batch = token_batch(batch_ids, y_ids, pad_id_of(tokenizer))
            batch["advantage"] = (r - baseline).astype(np.float32)
            state, metrics = step_fn.jitted(state, step_fn.place_global(batch))
            new_baseline = toy.baseline_decay * baseline + (1 - toy.baseline_decay) * r.mean()
            return state, {"baseline": jnp.float32(new_baseline)}, {**metrics, "reward": float(r.mean())}

        state, extra = train_loop(run, STAGE, state=state, total=toy.steps, work=work, batches=batches,
                                  extra={"baseline": jnp.float32(0.0)},
                                  checkpoint_every=config.train.checkpoint_every)
        components.export_policy(model_def.merge(state.params), run / "iter_0" / "policy",
                                 components.tokenizer_source(config.model, run))
        run.finish(STAGE, ["iter_0/policy"], baseline=float(extra["baseline"]))
    metrics = runs.read_metrics(run / "metrics.jsonl")
    return iterates_report.evaluate_and_write(
        config, run, iterates=[("pi_0", components.initial_policy_dir(config.model.path, run)),
                               ("pi_1", run / "iter_0" / "policy")],
        eval_prompts=splits.eval, tokenizer=tokenizer, judge=judge, mesh=mesh,
        iterations=[{"iteration": 0, **iterates_report.loss_curve(metrics, STAGE)}])


register(Recipe(name="toy_reinforce", run=run_toy, section="toy_reinforce", section_type=ToyConfig))
