"""Evaluation across iterates and the run report of the preference recipes (`nash-jax report RUN_DIR`,
also the last stage of a run): its cached eval stages, from the run config; reporting/ writes it.

On held-out prompts, each iterate (the initial policy included) draws `eval.samples_per_prompt`
responses; sample m of every iterate forms one candidate list per prompt, so one `prob_matrix` call per
prompt and sample judges every pair of iterates at once. The table T[a, b] = mean P(π_a ≻ π_b) has 0.5
on its diagonal. Three iterates a ≻ b ≻ c ≻ a (each entry above 1/2) are flagged as a cycle.

Per iterate: mean response length (tokens, characters), KL(π_t ‖ π_0) estimated from π_t's own samples
as mean log π_t(y) − log π_0(y) (an unbiased estimate at temperature 1, top-p 1), and, on the synthetic
task, its exact metrics (the exploitability under the oracle). Per iteration, what the recipe reports:
the loss curve, and for SPPO the winners' and losers' mean win rates and the fraction of examples whose
log-ratio reached its target.

Failure modes (reference: SPPO's "Failure modes"), measured so that progress can be told from
judge-fitting:
- length: beside each raw win rate, a length-controlled one (core.length_control: a logistic fit of the
  judged preferences with a term in the normalised length difference, read at equal length);
- win-rate saturation: per iteration, mean |P̂ − ½| of the samples trained on and the share of prompts
  whose samples the judge cannot tell apart (from the recipe's summaries), with a warning below
  eval.saturation_threshold;
- last-iterate cycling: eval.average_iterates adds the parameter average of π_1 … π_T (an extra row and
  column), the remedy to check when a cycle is flagged;
- judge exploitation: eval.best_of_n adds the last iterate reranked best-of-n by the training judge
  (labelled as such: it compounds the judge), and the report says plainly when only the training judge
  evaluated the iterates.

Outputs: RUN_DIR/report.json, RUN_DIR/report.md and PNG plots beside it. Samples (of the averaged and
the reranked policy too) and the averaged policy are cached in RUN_DIR/eval/ as manifest stages, so
re-running the report only judges and draws.
"""

import functools
import hashlib

import numpy as np

from nash_jax import runs
from nash_jax.core.length_control import length_controlled_table
from nash_jax.evaluation import heldout
from nash_jax.evaluation.iterate_averaging import average_policies
from nash_jax.evaluation.reranking import rerank_groups
from nash_jax.evaluation.tables import find_cycles, judged_matrices, win_rate_table
from nash_jax.reporting.iterates_text import STANDARD_PER_ITERATE, draw_plots, markdown
from nash_jax.reporting.writer import write_report
from nash_jax.rollout import engines
from nash_jax.rollout.batches import sequence_kls
from nash_jax.engine import judging, policy_files, prompt_sets
AVERAGE_LABEL = "pi_avg"


def evaluate_and_write(config, run, *, iterates, eval_prompts, tokenizer, judge, mesh, iterations,
                       policy_metrics=None, response_metrics=None):
    """Sample every iterate on the held-out prompts, judge, and write report.json / report.md.

    iterates: [(label, HF directory)], π_0 first; iterations: the recipe's per-iteration summaries
    ({"iteration", "steps", "loss", ...}, see `loss_curve`; SPPO's carry `mean_abs_advantage` and
    `indistinct_share`); policy_metrics(model, prompt_ids) -> {name: value}: exact metrics of a policy
    where its task has them (the synthetic task's exploitability); response_metrics(prompts,
    responses [B][M]) -> {name: value}: figures of an iterate's held-out samples (a scalar-reward
    recipe's mean reward), in each per-iterate entry and, π_0 first, as lists at the top level."""
    ids, kept, _ = prompt_sets.encode_prompts(config.data, tokenizer, eval_prompts, "evaluation prompts")
    prompts = [eval_prompts[i] for i in kept]
    # π_0, loaded at most once, and only if some iterate's samples still need scoring under it
    initial_model = functools.cache(lambda: policy_files.load_policy(iterates[0][1], config.model, mesh))
    sample = functools.partial(eval_samples, initial_model=initial_model, policy_metrics=policy_metrics)
    samples = [sample(config, run, i, path, ids, tokenizer, mesh) for i, (_, path) in enumerate(iterates)]
    labels = [label for label, _ in iterates]
    last = len(iterates) - 1
    extras, averaged = extra_rows(config, run, iterates, ids, prompts, tokenizer, judge, mesh, samples,
                                  labels, sample)
    del sample
    del initial_model  # free π_0 before judging
    figures = [response_metrics(prompts, s["responses"]) if response_metrics else {} for s in samples]
    for s, extra in zip(samples, figures):
        s["exact"] = s["exact"] | extra
    if config.eval.verifier:  # the policies' greedy accuracy on the held-out prompts
        policies = [*iterates, *([(AVERAGE_LABEL, averaged)] if averaged is not None else [])]
        add_heldout_accuracy(config, run, policies, samples, prompts, ids, tokenizer, mesh)
    responses = [s["responses"] for s in samples]
    judged = judged_matrices(judge, prompts, responses, config.judge.prompts_per_call)
    table = judged.mean(axis=(0, 1))
    controlled = length_controlled_table(judged, np.array([s["lengths"] for s in samples]))
    second = None
    if config.eval.second_judge is not None:
        second_judge = judging.make_judge(config.eval.second_judge, mesh, "eval.second_judge")
        second = win_rate_table(second_judge, prompts, responses,
                                config.eval.second_judge.prompts_per_call).tolist()
    metrics = runs.read_metrics(run / "metrics.jsonl")
    per_iterate = per_iterate_entries(labels, samples, table, controlled)
    average, best = extra_comparisons(config, iterates, extras, per_iterate, table, controlled, labels)
    report = {
        "run_dir": str(run.path), "recipe": config.recipe, "judge": config.judge.kind,
        "second_judge": config.eval.second_judge.kind if config.eval.second_judge else None,
        "iterates": labels, "final_iterate": labels[last],
        "iterate_dirs": {label: str(path) for label, path in iterates}, "extra_rows": extras,
        "win_rate_table": table.tolist(), "length_controlled_table": controlled.tolist(),
        "win_rate_table_second_judge": second, **outcome(config, table, controlled, labels, last),
        "average": average, "best_of_n": best, "per_iterate": per_iterate,
        **heldout_columns(config, per_iterate[:len(iterates)]),
        **{key: [f[key] for f in figures[:len(iterates)]] for key in figures[0]},
        "per_iteration": iterations, **saturation(config, iterations),
        "eval_prompts": len(prompts), "samples_per_prompt": config.eval.samples_per_prompt,
        "prompt_duplicates_dropped": run.manifest.get("inputs", {}).get("prompts", {}).get(
            "duplicates_dropped"),
    }
    return write_report(run, report, markdown=markdown,
                        draw=lambda figures: draw_plots(figures, report, metrics))

def add_heldout_accuracy(config, run, policies, samples, prompts, ids, tokenizer, mesh):
    """Each policy's greedy accuracy on the held-out prompts under eval.verifier, added to its exact
    metrics; the rows of all of them joined in RUN_DIR/eval/heldout.jsonl."""
    for i, (label, path) in enumerate(policies):
        samples[i]["exact"] = samples[i]["exact"] | heldout.verify(
            run, label, functools.partial(policy_files.load_policy, path, config.model, mesh),
            prompts, ids, tokenizer, mesh, verifier=config.eval.verifier, sampling=config.sampling,
            max_new_tokens=config.eval.max_new_tokens, seed=config.seed)
    heldout.write_all(run, [label for label, _ in policies])


def extra_comparisons(config, iterates, extras, per_iterate, table, controlled, labels):
    """(the average's row against the last iterate, best-of-n's), each None when it is not asked for."""
    last = len(iterates) - 1
    average = best = None
    if AVERAGE_LABEL in extras:
        average = compare(per_iterate, table, controlled, labels, labels.index(AVERAGE_LABEL), last)
        average["of"] = [label for label, _ in iterates[1:]]
    if config.eval.best_of_n:
        best = compare(per_iterate, table, controlled, labels, len(labels) - 1, last)
        reranked_by = config.eval.rerank_judge or config.judge
        best |= {"n": config.eval.best_of_n, "of": labels[last], "judge": reranked_by.kind,
                 "uses_training_judge": config.eval.rerank_judge is None}
    return average, best


def outcome(config, table, controlled, labels, last):
    """The final iterate against π_0, raw and length-controlled, and the cycles among the iterates."""
    return {"final_vs_initial": float(table[last, 0]),
            "final_vs_initial_length_controlled": float(controlled[last, 0]),
            "cycles": find_cycles(table[:last + 1, :last + 1], labels[:last + 1])}


def heldout_columns(config, per_iterate):
    """Each iterate's held-out greedy accuracy and format rate, where eval.verifier is set."""
    if not config.eval.verifier:
        return {}
    return {"heldout_accuracy": [e["heldout_accuracy"] for e in per_iterate],
            "heldout_format_rate": [e.get("heldout_format_rate") for e in per_iterate]}


def saturation(config, iterations):
    return {"saturation_threshold": config.eval.saturation_threshold,
            "saturated_iterations": [e["iteration"] for e in iterations
                                     if e.get("mean_abs_advantage", 1.0) < config.eval.saturation_threshold]}


def extra_rows(config, run, iterates, ids, prompts, tokenizer, judge, mesh, samples, labels, sample):
    """The optional rows beyond the iterates, appended to `samples` and `labels`: the parameter
    average of π_1 … π_T (eval.average_iterates) and the last iterate reranked best-of-n
    (eval.best_of_n). Returns ({label: what the row is}, the average's directory or None).
    sample(config, run, index, path, ids, tokenizer, mesh, name=...) draws a policy's samples."""
    last = len(iterates) - 1
    extras, averaged = {}, None
    if config.eval.average_iterates and len(iterates) > 1:
        averaged = average_iterate(config, run, iterates[1:], mesh, tokenizer)
        samples.append(sample(config, run, len(iterates), averaged, ids, tokenizer, mesh, name="average"))
        labels.append(AVERAGE_LABEL)
        extras[AVERAGE_LABEL] = ("parameter average of " + ", ".join(label for label, _ in iterates[1:]))
    if config.eval.best_of_n:
        n = config.eval.best_of_n
        reranker, suffix = rerank_judge(config, judge, mesh)
        samples.append(reranked_samples(config, run, len(iterates) + 1, iterates[-1][1], ids, prompts,
                                        tokenizer, reranker, mesh, suffix))
        labels.append(f"{labels[last]}_best_of_{n}{suffix}")
        extras[labels[-1]] = (f"{labels[last]} reranked best-of-{n} by the training judge "
                              f"({config.judge.kind}): judge exploitation compounds" if not suffix else
                              f"{labels[last]} reranked best-of-{n} by eval.rerank_judge "
                              f"({config.eval.rerank_judge.kind})")
    return extras, averaged


def per_iterate_entries(labels, samples, table, controlled):
    """Per row: mean length, KL(π_t ‖ π_0) from its own samples, its win rates against π_0 and its
    exact metrics."""
    entries = []
    for label, s in zip(labels, samples):
        entries.append({
            "iterate": label,
            "mean_length_tokens": float(np.mean(s["lengths"])),
            "mean_length_chars": float(np.mean([len(r) for rs in s["responses"] for r in rs])),
            # best-of-n's samples are not π_t's: the KL along them is not π_t's KL
            "kl_to_initial": kl_to_initial(s),
            "vs_initial": float(table[labels.index(label), 0]),
            "vs_initial_length_controlled": float(controlled[labels.index(label), 0]),
            **s["exact"]})
    return entries


def kl_to_initial(samples):
    """The mean of the samples' exact KL to π_0; for samples evaluated before it was kept (a run
    started on an earlier version), the mean sampled log-ratio they hold instead; else None."""
    if "kl_initial" in samples:
        return float(np.mean(samples["kl_initial"]))
    if "logp_initial" in samples:
        return float(np.mean(np.subtract(samples["logp"], samples["logp_initial"])))
    return None


def compare(per_iterate, table, controlled, labels, row, last):
    """An extra row (the average, best-of-n) against the last iterate: win rates, raw and length-
    controlled, and the differences in the exact metrics where there are any."""
    out = {"label": labels[row], "vs_last": float(table[row, last]),
           "vs_last_length_controlled": float(controlled[row, last]),
           "vs_initial": float(table[row, 0])}
    for key, value in per_iterate[row].items():
        if key not in STANDARD_PER_ITERATE and key in per_iterate[last]:
            out[key], out[f"last_{key}"] = value, per_iterate[last][key]
    return out


def average_iterate(config, run, iterates, mesh, tokenizer):
    """The parameter average of `iterates` as an HF directory, RUN_DIR/eval/average/policy (cached as
    stage eval/average)."""
    stage, path = "eval/average", run / "eval" / "average" / "policy"
    if not run.done(stage):
        average_policies([p for _, p in iterates], path, mesh=mesh, dtype=config.model.dtype,
                         param_dtype=config.model.param_dtype,
                         tokenizer_dir=policy_files.tokenizer_source(config.model, run))
        run.finish(stage, [str(path.relative_to(run.path))], of=[label for label, _ in iterates])
    return path


def rerank_judge(config, judge, mesh):
    """(the judge that reranks best-of-n, a suffix naming it): eval.rerank_judge, built, with
    "_by_<kind>_<digest of its config>"; the training judge `judge` and "" when that is unset."""
    if config.eval.rerank_judge is None:
        return judge, ""
    digest = hashlib.sha256(repr(config.eval.rerank_judge).encode()).hexdigest()[:8]
    return (judging.make_judge(config.eval.rerank_judge, mesh, "eval.rerank_judge"),
            f"_by_{config.eval.rerank_judge.kind}_{digest}")


def reranked_samples(config, run, index, policy_path, prompt_ids, prompts, tokenizer, judge, mesh,
                     suffix=""):
    """The policy at `policy_path` reranked best-of-n by `judge`: for each of eval.samples_per_prompt
    samples, n drawn and the one with the highest win rate among them kept (cached as stage
    eval/samples_best_of_n<suffix>, the suffix naming a judge other than the training one)."""
    n = config.eval.best_of_n
    name = f"samples_best_of_{n}{suffix}"
    stage, path = f"eval/{name}", run / "eval" / f"{name}.parquet"
    if run.done(stage):
        return runs.read_table(path) | {"exact": {}}
    model = policy_files.load_policy(policy_path, config.model, mesh)
    columns, _ = engines.sample_policy(
        model, policy_path, tokenizer, prompt_ids, num_samples=config.eval.samples_per_prompt * n,
        sampling=config.sampling, mesh=mesh, desc=f"eval best-of-{n}",
        max_new_tokens=config.eval.max_new_tokens, work_dir=run / "eval" / f"vllm_{name}",
        key_of=lambda b: runs.stage_key(config.seed, index, "eval", b), crash_prefix=stage,
        dtype=config.model.dtype)
    del model
    columns = rerank_groups(columns, n, judge, prompts, per_call=config.judge.prompts_per_call,
                            where=f"best-of-{n} reranking of {policy_path}")
    runs.write_table(path, columns)
    run.finish(stage, [str(path.relative_to(run.path))], n=n)
    engines.clean_up(run / "eval" / f"vllm_{name}")
    return columns | {"exact": {}}


def eval_samples(config, run, index, policy_path, prompt_ids, tokenizer, mesh, *, initial_model,
                 policy_metrics=None, name=None):
    """Iterate `index`'s held-out samples with log π_t and Σ_t KL(π_t ‖ π_0) along each, and its exact
    metrics (cached as stage eval/samples_<name, default index>, the metrics in the stage's info)."""
    name = index if name is None else name
    stage, path = f"eval/samples_{name}", run / "eval" / f"samples_{name}.parquet"
    if run.done(stage):
        return runs.read_table(path) | {"exact": run.info(stage)}
    model = policy_files.load_policy(policy_path, config.model, mesh)
    # the stage's info holds the exact metrics only; vLLM's log-probs stay in the table (logp_vllm)
    columns, _ = engines.sample_policy(
        model, policy_path, tokenizer, prompt_ids, num_samples=config.eval.samples_per_prompt,
        sampling=config.sampling, mesh=mesh, desc=f"eval pi_{index}",
        max_new_tokens=config.eval.max_new_tokens, work_dir=run / "eval" / f"vllm_samples_{name}",
        key_of=lambda b: runs.stage_key(config.seed, index, "eval", b), crash_prefix=stage,
        dtype=config.model.dtype)
    # Σ_t KL(π_t ‖ π_0) at each sampled prefix: exact over the vocabulary, never negative
    columns["kl_initial"] = ([[0.0] * len(r) for r in columns["response_ids"]] if index == 0 else
                             sequence_kls(model, initial_model(), prompt_ids, columns["response_ids"],
                                          tokenizer, mesh, temperature=config.sampling.temperature or 1.0))
    exact = policy_metrics(model, prompt_ids) if policy_metrics is not None else {}
    runs.write_table(path, columns)
    run.finish(stage, [str(path.relative_to(run.path))], **exact)
    engines.clean_up(run / "eval" / f"vllm_samples_{name}")
    return columns | {"exact": exact}


def loss_curve(metrics, stage, first=0, last=None):
    """{"steps", "loss"} of `stage`'s training steps in (first, last]: the part of a recipe's
    per-iteration summary that every recipe has."""
    steps = [m for m in metrics if m["stage"] == stage and "loss" in m
             and first < m["step"] and (last is None or m["step"] <= last)]
    return {"loss": [m["loss"] for m in steps], "steps": [m["step"] for m in steps]}
