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


import jax
import numpy as np

from nash_jax import data, report, runs
from nash_jax.recipes import common
from nash_jax.sampling import eos_ids_of, generate, mixture_generate, pad_id_of
from nash_jax.train import init_train_state, make_logprobs, make_optimizer
from nash_jax.train.steps import make_nash_md_pg_step

STAGE = "nash_md"
EVAL_STAGE = "nash_md_eval"  # metrics.jsonl records keep one (stage, step) each


def run_nash_md(config, run):
    check(config)
    mesh, tokenizer, splits, judge = common.prepare(config, run)
    if not run.done(STAGE):
        train(config, run, splits, tokenizer, judge, mesh)
        run.finish(STAGE, [f"iter_{k}/policy" for k in range(config.nash_md.snapshots)])
    return report.evaluate_and_write(config, run, splits.eval, tokenizer, judge, mesh)


def check(config):
    n = config.nash_md
    if n.steps % n.snapshots:
        raise ValueError(f"nash_md.steps={n.steps} is not a multiple of nash_md.snapshots={n.snapshots}")


def train(config, run, splits, tokenizer, judge, mesh):
    n = config.nash_md
    prompts = splits.iterations[0]
    ids, kept, _ = common.encode_prompts(config, tokenizer, prompts, "training prompts")
    texts = [prompts[i] for i in kept]
    eval_ids, _, _ = common.encode_prompts(config, tokenizer, splits.eval, "evaluation prompts",
                                           too_long="truncate_left")
    exact = report.has_exact_exploitability(config)

    initial = common.load_policy(common.initial_policy_dir(config, run), config, mesh)
    tx, schedule = make_optimizer(common.optimizer_config(config, n.steps))
    model_def, state, shardings = init_train_state(initial, tx, mesh=mesh, seed=config.seed)
    reference = _copy(state.params)  # μ
    step_fn = make_nash_md_pg_step(model_def, tx, schedule, shardings, mesh, tau=n.tau,
                                   micro_batches=config.train.micro_batches)
    logprobs = make_logprobs(model_def, mesh)
    epochs = -(-n.steps * n.prompts_per_step // len(ids))
    batches = iter(data.batches(list(zip(texts, ids)), n.prompts_per_step, epochs=epochs,
                                seed=common.stage_seed(config.seed, 0, "train"), drop_remainder=True))
    manager = runs.checkpoint_manager(run / STAGE / "checkpoints", config.train.checkpoint_every)
    start = 0
    restored = runs.restore_checkpoint(manager, {"state": state, "reference": reference})
    if restored is not None:
        start, trees, extra = restored
        state, reference = trees["state"], trees["reference"]
        batches.set_state(extra["data"])

    s = config.sampling
    sampling = dict(max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p,
                    top_k=s.top_k, eos_token_ids=eos_ids_of(tokenizer), mesh=mesh,
                    pad_id=pad_id_of(tokenizer))
    per_snapshot = n.steps // n.snapshots
    bar = common.progress(n.steps, STAGE, "step")
    bar.update(start)
    for step in range(start, n.steps):
        if exact and step % n.eval_every == 0:
            policy = model_def.merge(state.params)
            run.log_metrics(EVAL_STAGE, step, {"exploitability": report.synthetic_exploitability(
                policy, eval_ids, tokenizer, mesh)})
        batch_texts, batch_ids = zip(*next(batches))
        policy, mu = model_def.merge(state.params), model_def.merge(reference)
        ys = generate(policy, list(batch_ids), num_samples=1,
                      key=common.stage_key(config.seed, 0, "generate", step), **sampling)
        opponents = mixture_generate(policy, mu, n.mixture_beta, list(batch_ids), num_samples=1,
                                     key=common.stage_key(config.seed, 0, "opponent", step), **sampling)
        y_ids = [ys.tokens[b, 0, :ys.lengths[b, 0]].tolist() for b in range(len(batch_ids))]
        y_texts = [tokenizer.decode(r, skip_special_tokens=True) for r in y_ids]
        o_texts = [tokenizer.decode(opponents.tokens[b, 0, :opponents.lengths[b, 0]],
                                    skip_special_tokens=True) for b in range(len(batch_ids))]
        try:
            pref = judge.prob(list(batch_texts), y_texts, o_texts)
        except ValueError as err:
            raise ValueError(f"judging Nash-MD step {step + 1}: {err}") from None
        batch = common.token_batch(batch_ids, y_ids, pad_id_of(tokenizer))
        batch["ref_logp"] = np.asarray(logprobs.jitted(reference, logprobs.place_global(batch)),
                                       np.float32)
        batch["pref"] = pref.astype(np.float32)
        state, metrics = step_fn.jitted(state, step_fn.place_global(batch))
        metrics = {**jax.device_get(metrics), "pref_mean": float(pref.mean()),
                   "length_mean": float(np.mean([len(y) for y in y_ids]))}
        run.log_metrics(STAGE, step + 1, metrics)
        bar.update(1)
        bar.set_postfix(pref=f"{float(pref.mean()):.3f}")
        if n.refresh_every and (step + 1) % n.refresh_every == 0:
            reference = _copy(state.params)
        if (step + 1) % per_snapshot == 0:
            k = (step + 1) // per_snapshot - 1
            common.export_policy(model_def.merge(state.params), run / f"iter_{k}" / "policy",
                                 common.tokenizer_source(config, run))
        if (step + 1) % config.train.checkpoint_every == 0 and step + 1 < n.steps:
            runs.save_checkpoint(manager, step + 1, {"state": state, "reference": reference},
                                 {"data": batches.get_state()})
        runs.crash_point(f"{STAGE}:step={step + 1}")
    if exact:
        run.log_metrics(EVAL_STAGE, n.steps, {"exploitability": report.synthetic_exploitability(
            model_def.merge(state.params), eval_ids, tokenizer, mesh)})
    bar.close()
    manager.close()


def _copy(params):
    """A copy of parameters that outlives them (the train state is donated to each step)."""
    return jax.tree.map(lambda x: x.copy(), params)
