"""Online RL on a scalar reward: GRPO, RLOO and Dr. GRPO (Shao et al. 2024; Ahmadian et al. 2024; Liu
et al. 2025). Each step, on `prompts_per_step` prompts:

    y_1 … y_K ~ π_θ(· | x)                 K = samples_per_prompt, the run's `sampling` settings;
                                           behaviour log-probs from the sampler
    r_i = r(x, y_i)                        the run's judge as a reward: judge.kind reward_model (an HF
                                           *ForSequenceClassification directory) or python with
                                           returns: rewards; a preference-only judge is refused
    A_i within the prompt's group          advantage grpo (r − mean)/(std + eps), rloo (leave-one-out
                                           mean), drgrpo (r − mean): core.advantages.group_advantages
    train.epochs `pg_kl` steps             clipped policy gradient, `aggregation`, k3 KL towards π_0
                                           with weight kl_coef (its value logged at 0 too)

Every `train.*` field acts through the shared online layer (engine/learner.py); a rerun of a killed
run resumes from the latest checkpoint and ends with the same parameters. Each step's rollouts (prompt,
response, reward, the advantage its batch carries) are kept in RUN_DIR/grpo/rollouts/step_<n>.parquet.
The policy is exported as RUN_DIR/iter_k/policy at `snapshots` evenly spaced steps; the report compares
them with π_0 as every online recipe's does, and adds each iterate's mean reward on the held-out
prompts (its eval.samples_per_prompt samples at the sampling settings, under the same reward).

The modules, by concern: config (the section, its checks, the stage name), credit (rollouts, group
advantages, the batch), training (the step, the loop, plan_step) and report.
"""

from nash_jax.engine import Recipe, register
from nash_jax.engine.registry import ONLINE_REFUSALS, ONLINE_SAMPLING, ONLINE_TRAIN
from nash_jax.recipes.grpo.config import STAGE, GRPOConfig, check
from nash_jax.recipes.grpo.credit import group_credit, rollout_columns, step_batch
from nash_jax.recipes.grpo.report import HELDOUT_REWARD, summary, write_report
from nash_jax.recipes.grpo.training import plan_step, train
from nash_jax.engine.preparation import prepare

# the names other modules, tools and tests use
__all__ = ["HELDOUT_REWARD", "STAGE", "GRPOConfig", "check", "group_credit", "plan_step",
           "rollout_columns", "run_grpo", "step_batch", "summary", "train", "write_report"]


def run_grpo(config, run):
    mesh, tokenizer, splits, reward = prepare(config, run)
    if not run.done(STAGE):
        train(config, run, splits.iterations[0], tokenizer, reward, mesh)
    return write_report(config, run, splits.eval, tokenizer, reward, mesh)


register(Recipe(name="grpo", run=run_grpo, section="grpo", section_type=GRPOConfig, check=check,
                summary=summary, plan_step=plan_step,
                batch_sizes=lambda config: {"grpo.prompts_per_step × grpo.samples_per_prompt":
                                            config.grpo.prompts_per_step * config.grpo.samples_per_prompt},
                reads={"train": ONLINE_TRAIN, "sampling": ONLINE_SAMPLING}, refusals=ONLINE_REFUSALS))
