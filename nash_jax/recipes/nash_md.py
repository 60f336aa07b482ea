"""Online Nash-MD-PG: each step, on a batch of prompts,

    y  ~ π_θ                                         (generate)
    y' ~ softmax((1 − β) log π_θ + β log μ)          (mixture_generate: the opponent)
    P(y ≻ y')                                        (the judge)
    a REINFORCE step on P(y ≻ y') − 1/2 with KL weight τ towards μ   (nash_md_pg_step)

with μ optionally refreshed to π_θ every `refresh_every` steps (iterative Nash-MD). Every
`checkpoint_every` steps an orbax checkpoint holds the train state, μ and the prompt iterator's state; a
rerun continues from it and ends with the same parameters. The policy is exported as
RUN_DIR/iter_k/policy at `snapshots` evenly spaced steps, so the report compares those iterates like
SPPO's; on the synthetic task the exact exploitability under the oracle is logged every `eval_every`
steps.
"""


from dataclasses import dataclass

import numpy as np

from nash_jax import data, runs
from nash_jax.engine import policy_files, prompt_sets
from nash_jax.config import AT_LEAST_1, NON_NEGATIVE, PROBABILITY
from nash_jax.parallel.padding import bucket_size
from nash_jax.engine.plan import StepShape
from nash_jax.engine import Recipe, register
from nash_jax.engine.registry import ONLINE_SAMPLING, ONLINE_TRAIN
from nash_jax.engine import iterates_report
from nash_jax.engine.learner import OnlineLearner, OnlineRecipe, Rollout, copy
from nash_jax.engine.preparation import prepare
from nash_jax.rollout.batches import token_batch
from nash_jax.rollout.sampling import generate, mixture_generate, pad_id_of
from nash_jax.tasks.synthetic import synthetic_eval
from nash_jax.train import make_logprobs

STAGE = "nash_md"
EVAL_STAGE = "nash_md_eval"  # metrics.jsonl records keep one (stage, step) each
# why sampling.engine: vllm is refused (it applies to SPPO: rollout/engines.py)
NO_VLLM = ("its opponent samples the token-wise geometric mixture of two models' logits (π_θ and μ), "
           "which vLLM cannot, and its policy changes every step (weight sync to vLLM is not built)")


@dataclass(frozen=True)
class NashMDConfig:
    DOMAINS = {"steps": AT_LEAST_1, "prompts_per_step": AT_LEAST_1, "mixture_beta": PROBABILITY,
               "tau": NON_NEGATIVE, "refresh_every": AT_LEAST_1, "snapshots": AT_LEAST_1,
               "eval_every": AT_LEAST_1}
    steps: int = 100
    prompts_per_step: int = 16
    mixture_beta: float = 0.125  # weight of the reference μ in the opponent's geometric mixture
    tau: float = 0.1  # KL weight
    refresh_every: int | None = None  # steps between μ ← π_θ (iterative Nash-MD); None = never
    snapshots: int = 3  # iterates exported as RUN_DIR/iter_k/policy, evenly spaced; steps must divide
    eval_every: int = 10  # steps between exact exploitability evaluations (synthetic task)


def run_nash_md(config, run):
    n = config.nash_md
    mesh, tokenizer, splits, judge = prepare(config, run)
    if not run.done(STAGE):
        train(config, run, splits, tokenizer, judge, mesh)
    iterates = [("pi_0", policy_files.initial_policy_dir(config.model.path, run))] + [
        (f"pi_{k + 1}", run / f"iter_{k}" / "policy") for k in range(n.snapshots)]
    return iterates_report.evaluate_and_write(
        config, run, iterates=iterates, eval_prompts=splits.eval, tokenizer=tokenizer, judge=judge,
        mesh=mesh, iterations=segment_summaries(config, run),
        policy_metrics=synthetic_eval.policy_metrics(config.judge.kind, config.model.path, tokenizer, mesh))


def check(config):
    n = config.nash_md
    if n.steps % n.snapshots:
        raise ValueError(f"nash_md.steps={n.steps} is not a multiple of nash_md.snapshots={n.snapshots}")


def segment_summaries(config, run):
    """Per exported snapshot: the loss curve of the steps that led to it."""
    metrics = runs.read_metrics(run / "metrics.jsonl")
    per = config.nash_md.steps // config.nash_md.snapshots
    return [{"iteration": k, **iterates_report.loss_curve(metrics, STAGE, k * per, (k + 1) * per)}
            for k in range(config.nash_md.snapshots)]


def train(config, run, splits, tokenizer, judge, mesh):
    n = config.nash_md
    prompts = splits.iterations[0]
    ids, kept, _ = prompt_sets.encode_prompts(config.data, tokenizer, prompts, "training prompts")
    texts = [prompts[i] for i in kept]
    eval_ids, _, _ = prompt_sets.encode_prompts(config.data, tokenizer, splits.eval, "evaluation prompts",
                                                too_long="truncate_left")
    exact = synthetic_eval.policy_metrics(config.judge.kind, config.model.path, tokenizer, mesh)
    epochs = -(-n.steps * n.prompts_per_step // len(ids))
    batches = iter(data.batches(list(zip(texts, ids)), n.prompts_per_step, epochs=epochs,
                                seed=runs.stage_seed(config.seed, 0, "train"), drop_remainder=True))

    def evaluate(learner, step, params, extra):
        return exact(learner.policy(params), eval_ids), extra

    def rollout(learner, step, params, extra, item):
        reference = extra["reference"]  # μ
        if n.refresh_every and step > 0 and step % n.refresh_every == 0:
            reference = copy(params)  # μ ← π_θ (iterative Nash-MD)
        batch_texts, batch_ids = zip(*item)
        sampling, initial = learner.sampling(tokenizer), learner.initial
        ys = generate(initial, list(batch_ids), num_samples=1, params=params,
                      key=runs.stage_key(config.seed, 0, "generate", step), **sampling)
        opponents = mixture_generate(initial, initial, n.mixture_beta, list(batch_ids), num_samples=1,
                                     policy_params=params, reference_params=reference,
                                     key=runs.stage_key(config.seed, 0, "opponent", step), **sampling)
        y_ids = [ys.tokens[b, 0, :ys.lengths[b, 0]].tolist() for b in range(len(batch_ids))]
        y_texts = [tokenizer.decode(r, skip_special_tokens=True) for r in y_ids]
        o_texts = [tokenizer.decode(opponents.tokens[b, 0, :opponents.lengths[b, 0]],
                                    skip_special_tokens=True) for b in range(len(batch_ids))]
        try:
            pref = judge.prob(list(batch_texts), y_texts, o_texts)
        except ValueError as err:
            raise ValueError(f"judging Nash-MD step {step + 1}: {err}") from None
        batch = token_batch(batch_ids, y_ids, pad_id_of(tokenizer))
        logprobs = make_logprobs(learner.model_def, mesh, logprob_chunk=config.train.logprob_chunk)
        batch["ref_logp"] = np.asarray(logprobs.jitted(reference, logprobs.place_global(batch)),
                                       np.float32)
        batch["pref"] = pref.astype(np.float32)
        return Rollout(batch, {"pref_mean": float(pref.mean()),
                               "length_mean": float(np.mean([len(y) for y in y_ids]))},
                       {"reference": reference})

    OnlineLearner(config, run, mesh).train(OnlineRecipe(
        stage=STAGE, steps=n.steps, shape=plan_step(config), rollout=rollout, snapshots=n.snapshots,
        evaluate=evaluate if exact is not None else None, eval_every=n.eval_every, eval_stage=EVAL_STAGE,
        batches=batches, reference_is_initial=False, extra=lambda learner: {"reference": copy(learner.state.params)}))


def plan_step(config):
    """One update: prompts_per_step responses of π_θ with their judged preferences."""
    n = config.nash_md
    return StepShape("nash_md_pg", {"tau": n.tau}, n.prompts_per_step,
                     bucket_size(config.data.max_prompt_tokens + config.sampling.max_new_tokens, minimum=8))


register(Recipe(name="nash_md", run=run_nash_md, section="nash_md", section_type=NashMDConfig,
                check=check, plan_step=plan_step,
                batch_sizes=lambda config: {"nash_md.prompts_per_step": config.nash_md.prompts_per_step},
                reads={"train": ONLINE_TRAIN, "sampling": ONLINE_SAMPLING},
                refusals={f"sampling.{name}": NO_VLLM for name in ("engine", "vllm_python")}))
