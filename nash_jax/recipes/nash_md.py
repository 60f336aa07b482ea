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
from nash_jax.setup import components
from nash_jax.config import AT_LEAST_1, NON_NEGATIVE, PROBABILITY
from nash_jax.parallel.padding import bucket_size
from nash_jax.setup.plan import StepShape
from nash_jax.recipes import Recipe, iterates_report, register
from nash_jax.recipes.online import copy, sampling_settings, start
from nash_jax.recipes.preparation import prepare
from nash_jax.rollout.batches import token_batch
from nash_jax.rollout.sampling import generate, mixture_generate, pad_id_of
from nash_jax.tasks.synthetic import synthetic_eval
from nash_jax.train import make_logprobs

STAGE = "nash_md"
EVAL_STAGE = "nash_md_eval"  # metrics.jsonl records keep one (stage, step) each


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
    mesh, tokenizer, splits, judge = prepare(config, run,
                                             batch_sizes={"nash_md.prompts_per_step": n.prompts_per_step})
    if not run.done(STAGE):
        train(config, run, splits, tokenizer, judge, mesh)
        run.finish(STAGE, [f"iter_{k}/policy" for k in range(n.snapshots)])
    iterates = [("pi_0", components.initial_policy_dir(config.model.path, run))] + [
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
    ids, kept, _ = components.encode_prompts(config.data, tokenizer, prompts, "training prompts")
    texts = [prompts[i] for i in kept]
    eval_ids, _, _ = components.encode_prompts(config.data, tokenizer, splits.eval, "evaluation prompts",
                                               too_long="truncate_left")
    exact = synthetic_eval.policy_metrics(config.judge.kind, config.model.path, tokenizer, mesh)

    online = start(config, run, mesh, initial_dir=components.initial_policy_dir(config.model.path, run),
                   tokenizer_dir=components.tokenizer_source(config.model, run), objective="nash_md_pg",
                   total_steps=n.steps, tau=n.tau)
    initial, model_def = online.initial, online.model_def
    logprobs = make_logprobs(model_def, mesh, logprob_chunk=config.train.logprob_chunk)
    epochs = -(-n.steps * n.prompts_per_step // len(ids))
    batches = iter(data.batches(list(zip(texts, ids)), n.prompts_per_step, epochs=epochs,
                                seed=runs.stage_seed(config.seed, 0, "train"), drop_remainder=True))
    sampling = dict(sampling_settings(config, tokenizer, mesh), max_new_tokens=config.sampling.max_new_tokens)
    per_snapshot = n.steps // n.snapshots

    def evaluate(step, params):
        if exact is not None:
            run.log_metrics(EVAL_STAGE, step, exact(model_def.merge(params), eval_ids))

    def work(step, state, extra, item):
        if step % n.eval_every == 0:
            evaluate(step, state.params)
        reference = extra["reference"]  # μ
        batch_texts, batch_ids = zip(*item)
        # `initial` only lends its structure: the sampler splits it once and takes new params each step
        ys = generate(initial, list(batch_ids), num_samples=1, params=state.params,
                      key=runs.stage_key(config.seed, 0, "generate", step), **sampling)
        opponents = mixture_generate(initial, initial, n.mixture_beta, list(batch_ids), num_samples=1,
                                     policy_params=state.params, reference_params=reference,
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
        batch["ref_logp"] = np.asarray(logprobs.jitted(reference, logprobs.place_global(batch)),
                                       np.float32)
        batch["pref"] = pref.astype(np.float32)
        state, metrics = online.step_fn.jitted(state, online.step_fn.place_global(batch))
        metrics = {**metrics, "pref_mean": float(pref.mean()),
                   "length_mean": float(np.mean([len(y) for y in y_ids]))}
        if n.refresh_every and (step + 1) % n.refresh_every == 0:
            reference = copy(state.params)
        if (step + 1) % per_snapshot == 0:
            k = (step + 1) // per_snapshot - 1
            online.export(state.params, run / f"iter_{k}" / "policy")
        return state, {"reference": reference}, metrics

    state, _ = online.loop(STAGE, total=n.steps, work=work, batches=batches,
                           extra={"reference": copy(online.state.params)})
    evaluate(n.steps, state.params)


def plan_step(config):
    """One update: prompts_per_step responses of π_θ with their judged preferences."""
    n = config.nash_md
    return StepShape("nash_md_pg", {"tau": n.tau}, n.prompts_per_step,
                     bucket_size(config.data.max_prompt_tokens + config.sampling.max_new_tokens, minimum=8))


register(Recipe(name="nash_md", run=run_nash_md, section="nash_md", section_type=NashMDConfig,
                check=check, plan_step=plan_step))
