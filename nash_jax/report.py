"""Evaluation across iterates and the run report (`nash-jax report RUN_DIR`, also the last stage of a run).

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
import itertools
import json
from pathlib import Path

import numpy as np

from nash_jax import components, heldout, runs
from nash_jax.core.length_control import length_controlled_table
from nash_jax.iterate_averaging import average_policies
from nash_jax.judges.base import judge_in_chunks
from nash_jax.reranking import rerank_groups
from nash_jax.rollouts import sample_rows, sequence_logprobs

AVERAGE_LABEL = "pi_avg"

STANDARD_PER_ITERATE = ("iterate", "mean_length_tokens", "mean_length_chars", "kl_to_initial",
                        "vs_initial", "vs_initial_length_controlled")


def evaluate_and_write(config, run, *, iterates, eval_prompts, tokenizer, judge, mesh, iterations,
                       policy_metrics=None, response_metrics=None):
    """Sample every iterate on the held-out prompts, judge, and write report.json / report.md.

    iterates: [(label, HF directory)], π_0 first; iterations: the recipe's per-iteration summaries
    ({"iteration", "steps", "loss", ...}, see `loss_curve`; SPPO's carry `mean_abs_advantage` and
    `indistinct_share`); policy_metrics(model, prompt_ids) -> {name: value}: exact metrics of a policy
    where its task has them (the synthetic task's exploitability); response_metrics(prompts,
    responses [B][M]) -> {name: value}: figures of an iterate's held-out samples (a scalar-reward
    recipe's mean reward), in each per-iterate entry and, π_0 first, as lists at the top level."""
    ids, kept, _ = components.encode_prompts(config, tokenizer, eval_prompts, "evaluation prompts")
    prompts = [eval_prompts[i] for i in kept]
    # π_0, loaded at most once, and only if some iterate's samples still need scoring under it
    initial_model = functools.cache(lambda: components.load_policy(iterates[0][1], config, mesh))
    samples = [eval_samples(config, run, i, path, ids, tokenizer, mesh, initial_model, policy_metrics)
               for i, (_, path) in enumerate(iterates)]
    labels = [label for label, _ in iterates]
    last = len(iterates) - 1
    extras = {}  # label -> what the extra row is
    average = best = None
    average_row = config.eval.average_iterates and len(iterates) > 1
    if average_row:
        averaged = average_iterate(config, run, iterates[1:], mesh, tokenizer)
        samples.append(eval_samples(config, run, len(iterates), averaged, ids, tokenizer, mesh,
                                    initial_model, policy_metrics, name="average"))
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
    del initial_model  # free π_0 before judging
    figures = [response_metrics(prompts, s["responses"]) if response_metrics else {} for s in samples]
    for s, extra in zip(samples, figures):
        s["exact"] = s["exact"] | extra
    if config.eval.verifier:  # the policies' greedy accuracy on the held-out prompts
        policies = [*iterates, *([(AVERAGE_LABEL, averaged)] if average_row else [])]
        for i, (label, path) in enumerate(policies):
            samples[i]["exact"] = samples[i]["exact"] | heldout.verify(
                config, run, label, functools.partial(components.load_policy, path, config, mesh),
                prompts, ids, tokenizer, mesh)
        heldout.write_all(run, [label for label, _ in policies])
    responses = [s["responses"] for s in samples]
    judged = judged_matrices(judge, prompts, responses, config.judge.prompts_per_call)
    table = judged.mean(axis=(0, 1))
    controlled = length_controlled_table(judged, np.array([s["lengths"] for s in samples]))
    second = None
    if config.eval.second_judge is not None:
        second_judge = components.make_judge(config.eval.second_judge, mesh, "eval.second_judge")
        second = win_rate_table(second_judge, prompts, responses,
                                config.eval.second_judge.prompts_per_call).tolist()
    metrics = runs.read_metrics(run / "metrics.jsonl")
    per_iterate = []
    for label, s in zip(labels, samples):
        entry = {"iterate": label,
                 "mean_length_tokens": float(np.mean(s["lengths"])),
                 "mean_length_chars": float(np.mean([len(r) for rs in s["responses"] for r in rs])),
                 # best-of-n's samples are not π_t's: log π_t(y) − log π_0(y) does not estimate its KL
                 "kl_to_initial": (float(np.mean(np.subtract(s["logp"], s["logp_initial"])))
                                   if "logp_initial" in s else None),
                 "vs_initial": float(table[labels.index(label), 0]),
                 "vs_initial_length_controlled": float(controlled[labels.index(label), 0]),
                 **s["exact"]}
        per_iterate.append(entry)
    if AVERAGE_LABEL in extras:
        average = compare(per_iterate, table, controlled, labels, labels.index(AVERAGE_LABEL), last)
        average["of"] = [label for label, _ in iterates[1:]]
    if config.eval.best_of_n:
        best = compare(per_iterate, table, controlled, labels, len(labels) - 1, last)
        reranked_by = config.eval.rerank_judge or config.judge
        best |= {"n": config.eval.best_of_n, "of": labels[last], "judge": reranked_by.kind,
                 "uses_training_judge": config.eval.rerank_judge is None}
    report = {
        "run_dir": str(run.path), "recipe": config.recipe, "judge": config.judge.kind,
        "second_judge": config.eval.second_judge.kind if config.eval.second_judge else None,
        "iterates": labels,
        "final_iterate": labels[last],
        "iterate_dirs": {label: str(path) for label, path in iterates},
        "extra_rows": extras,
        "win_rate_table": table.tolist(),
        "length_controlled_table": controlled.tolist(),
        "win_rate_table_second_judge": second,
        "final_vs_initial": float(table[last, 0]),
        "final_vs_initial_length_controlled": float(controlled[last, 0]),
        "cycles": find_cycles(table[:last + 1, :last + 1], labels[:last + 1]),
        "average": average,
        "best_of_n": best,
        "per_iterate": per_iterate,
        **({"heldout_accuracy": [e["heldout_accuracy"] for e in per_iterate[:len(iterates)]],
            "heldout_format_rate": [e.get("heldout_format_rate") for e in per_iterate[:len(iterates)]]}
           if config.eval.verifier else {}),
        **{key: [f[key] for f in figures[:len(iterates)]] for key in figures[0]},
        "per_iteration": iterations,
        "saturation_threshold": config.eval.saturation_threshold,
        "saturated_iterations": [e["iteration"] for e in iterations
                                 if e.get("mean_abs_advantage", 1.0) < config.eval.saturation_threshold],
        "eval_prompts": len(prompts), "samples_per_prompt": config.eval.samples_per_prompt,
    }
    runs.write_text_atomically(run / "report.json", json.dumps(report, indent=1))
    plots = draw_plots(report, metrics, run.path)
    runs.write_text_atomically(run / "report.md", markdown(report, plots))
    run.finish("report", ["report.json", "report.md", *plots], leaf=True)
    return report


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
                         tokenizer_dir=components.tokenizer_source(config, run))
        run.finish(stage, [str(path.relative_to(run.path))], of=[label for label, _ in iterates])
    return path


def rerank_judge(config, judge, mesh):
    """(the judge that reranks best-of-n, a suffix naming it): eval.rerank_judge, built, with
    "_by_<kind>_<digest of its config>"; the training judge `judge` and "" when that is unset."""
    if config.eval.rerank_judge is None:
        return judge, ""
    digest = hashlib.sha256(repr(config.eval.rerank_judge).encode()).hexdigest()[:8]
    return (components.make_judge(config.eval.rerank_judge, mesh, "eval.rerank_judge"),
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
    model = components.load_policy(policy_path, config, mesh)
    columns = sample_rows(
        model, tokenizer, prompt_ids, num_samples=config.eval.samples_per_prompt * n,
        sampling=config.sampling, mesh=mesh, desc=f"eval best-of-{n}",
        max_new_tokens=config.eval.max_new_tokens,
        key_of=lambda b: runs.stage_key(config.seed, index, "eval", b))
    del model
    columns = rerank_groups(columns, n, judge, prompts, per_call=config.judge.prompts_per_call,
                            where=f"best-of-{n} reranking of {policy_path}")
    runs.write_table(path, columns)
    run.finish(stage, [str(path.relative_to(run.path))], n=n)
    return columns | {"exact": {}}


def eval_samples(config, run, index, policy_path, prompt_ids, tokenizer, mesh, initial_model,
                 policy_metrics=None, name=None):
    """Iterate `index`'s held-out samples with log π_t and log π_0, and its exact metrics (cached as
    stage eval/samples_<name, default index>, the metrics in the stage's info)."""
    name = index if name is None else name
    stage, path = f"eval/samples_{name}", run / "eval" / f"samples_{name}.parquet"
    if run.done(stage):
        return runs.read_table(path) | {"exact": run.info(stage)}
    model = components.load_policy(policy_path, config, mesh)
    columns = sample_rows(
        model, tokenizer, prompt_ids, num_samples=config.eval.samples_per_prompt, sampling=config.sampling,
        mesh=mesh, desc=f"eval pi_{index}", max_new_tokens=config.eval.max_new_tokens,
        key_of=lambda b: runs.stage_key(config.seed, index, "eval", b))
    initial = model if index == 0 else initial_model()
    columns["logp_initial"] = sequence_logprobs(initial, prompt_ids, columns["response_ids"], tokenizer,
                                                mesh)
    exact = policy_metrics(model, prompt_ids) if policy_metrics is not None else {}
    runs.write_table(path, columns)
    run.finish(stage, [str(path.relative_to(run.path))], **exact)
    return columns | {"exact": exact}


def judged_matrices(judge, prompts, responses_per_iterate, per_call):
    """[M, B, n, n]: P(y_a ≻ y_b) between iterates a and b on prompt b's m-th sample; one n = #iterates
    candidate list per prompt and sample index."""
    n = len(responses_per_iterate)
    samples = len(responses_per_iterate[0][0])
    out = []
    for m in range(samples):
        candidates = [[responses_per_iterate[a][b][m] for a in range(n)] for b in range(len(prompts))]
        out.append(judge_in_chunks(judge, prompts, candidates, per_call=per_call,
                                   where=f"evaluation sample {m}"))
    return np.stack(out)


def win_rate_table(judge, prompts, responses_per_iterate, per_call):
    """T[a, b] = mean over prompts and sample index of P(y_a ≻ y_b)."""
    return judged_matrices(judge, prompts, responses_per_iterate, per_call).mean(axis=(0, 1))


def find_cycles(table, labels):
    """Every 3-cycle a ≻ b ≻ c ≻ a among iterates (≻: table entry above 1/2), as label triples."""
    table = np.asarray(table)
    cycles = []
    for a, b, c in itertools.combinations(range(len(labels)), 3):
        for x, y, z in ((a, b, c), (a, c, b)):
            if table[x, y] > 0.5 and table[y, z] > 0.5 and table[z, x] > 0.5:
                cycles.append([labels[x], labels[y], labels[z]])
    return cycles


def summary_lines(report):
    """The lines `nash-jax run` prints for a cross-iterate report."""
    lines = [f"final_vs_initial: {report['final_vs_initial']:.3f} (length-controlled "
             f"{report['final_vs_initial_length_controlled']:.3f})"]
    for entry in report["per_iterate"]:
        extra = "".join(f"  {key.replace('_', ' ')} {entry[key]:.4f}" for key in exact_keys(report)
                        if entry.get(key) is not None)
        kl = "-" if entry["kl_to_initial"] is None else f"{entry['kl_to_initial']:.3f}"
        lines.append(f"{entry['iterate']}: length {entry['mean_length_tokens']:.2f} tokens, KL to pi_0 "
                     f"{kl}{extra}")
    for key in ("average", "best_of_n"):
        if report.get(key):
            row = report[key]
            lines.append(
                f"{row['label']} vs {report['final_iterate']}: {row['vs_last']:.3f} (length-controlled "
                f"{row['vs_last_length_controlled']:.3f})"
                + (f", exploitability {row['exploitability']:.4f} vs {row['last_exploitability']:.4f}"
                   if "exploitability" in row else "")
                + (" [reranked with the training judge]" if key == "best_of_n" and row["uses_training_judge"]
                   else ""))
    if report["cycles"]:
        lines.append("cycles: " + "; ".join(" > ".join(c) for c in report["cycles"]))
    if report.get("saturated_iterations"):
        lines.append(f"warning: win rates saturated in iteration(s) {report['saturated_iterations']}")
    if report.get("second_judge") is None:
        lines.append("note: only the training judge evaluated the iterates (gains may be judge-fitting; "
                     "see eval.second_judge)")
    return lines


def loss_curve(metrics, stage, first=0, last=None):
    """{"steps", "loss"} of `stage`'s training steps in (first, last]: the part of a recipe's
    per-iteration summary that every recipe has."""
    steps = [m for m in metrics if m["stage"] == stage and "loss" in m
             and first < m["step"] and (last is None or m["step"] <= last)]
    return {"loss": [m["loss"] for m in steps], "steps": [m["step"] for m in steps]}


def draw_plots(report, metrics, directory):
    """PNG plots beside the report; returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory = Path(directory)
    labels = report["iterates"]
    names = []

    def save(fig, name):
        runs.write_atomically(directory / name, lambda tmp: fig.savefig(tmp, format="png", dpi=90))
        plt.close(fig)
        names.append(name)

    fig, ax = plt.subplots(figsize=(4 + 0.4 * len(labels), 3.5 + 0.4 * len(labels)))
    table = np.asarray(report["win_rate_table"])
    image = ax.imshow(table, vmin=0, vmax=1, cmap="RdBu_r")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_yticks(range(len(labels)), labels)
    for (a, b), value in np.ndenumerate(table):
        ax.text(b, a, f"{value:.2f}", ha="center", va="center", fontsize=8)
    ax.set_title("P(row ≻ column) on held-out prompts")
    fig.colorbar(image)
    save(fig, "win_rates.png")

    per = report["per_iterate"]
    keys = [("mean_length_tokens", "mean length (tokens)"), ("kl_to_initial", "KL(π_t ‖ π_0)")]
    keys += [(key, key.replace("_", " ")) for key in exact_keys(report)]
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3))
    for ax, (key, title) in zip(axes, keys):
        ax.plot(range(len(per)), [np.nan if p.get(key) is None else p[key] for p in per], marker="o")
        ax.set_xticks(range(len(per)), labels)
        ax.set_title(title)
    fig.tight_layout()
    save(fig, "iterates.png")

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for entry in report["per_iteration"]:
        if entry["loss"]:
            ax.plot(entry["steps"], entry["loss"], label=f"iteration {entry['iteration']}")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend()
    fig.tight_layout()
    save(fig, "loss.png")

    for key in exact_keys(report):  # logged during training too: their curve over steps
        logged = [m for m in metrics if key in m]
        if logged:
            fig, ax = plt.subplots(figsize=(6, 3.5))
            ax.plot([m["step"] for m in logged], [m[key] for m in logged], marker=".")
            ax.set_xlabel("step")
            ax.set_ylabel(key.replace("_", " "))
            fig.tight_layout()
            save(fig, f"{key}.png")
    return names


def exact_keys(report):
    """The per-iterate metrics beyond the standard ones (a task's exact metrics)."""
    return [k for k in report["per_iterate"][0] if k not in STANDARD_PER_ITERATE]


def _number(value, spec):
    return "-" if value is None else format(value, spec)


def table_lines(labels, rows):
    lines = ["| | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for label, row in zip(labels, rows):
        lines.append(f"| {label} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    return lines


def length_sentence(report):
    """How much of final_vs_initial's gain over ½ is length, in words."""
    raw, controlled = report["final_vs_initial"], report["final_vs_initial_length_controlled"]
    gain, part = raw - 0.5, round(raw - controlled, 3) + 0.0  # (+ 0.0: no "-0.000")
    text = (f"Length-controlled, the final iterate's win rate over pi_0 is {controlled:.3f} against "
            f"{raw:.3f} raw")
    if abs(gain) < 1e-3:
        return text + ": no gain to attribute."
    share = part / gain
    return text + (f": {part:+.3f} of the {gain:+.3f} gain over ½ ({100 * share:.0f}%) goes with "
                   "response length" + (" — most of the gain is length, not quality." if share > 0.5
                                        else "."))


def markdown(report, plots):
    labels = report["iterates"]
    final = report["final_iterate"]
    exact = exact_keys(report)
    lines = [f"# Run report: {report['recipe']} ({report['run_dir']})", "",
             f"Judge: {report['judge']}. {report['eval_prompts']} held-out prompts × "
             f"{report['samples_per_prompt']} samples per iterate.", "",
             f"**final_vs_initial = {report['final_vs_initial']:.3f}** (P({final} ≻ pi_0)); "
             f"length-controlled **{report['final_vs_initial_length_controlled']:.3f}**.", "",
             length_sentence(report), ""]
    if report.get("second_judge") is None:
        lines += [f"**Only the training judge ({report['judge']}) evaluated these iterates: the gains "
                  "may be judge-fitting.** Set `eval.second_judge` (an independent judge) to check them "
                  "against another evaluator.", ""]
    if report["extra_rows"]:
        lines += ["Extra rows: " + "; ".join(f"`{k}`: {v}" for k, v in report["extra_rows"].items())
                  + ".", ""]
    lines += ["## Win rates, P(row ≻ column)", "", *table_lines(labels, report["win_rate_table"]), "",
              "## Length-controlled win rates, P(row ≻ column) at equal length", "",
              "A logistic fit of the judge's preferences with a term in tanh(length difference / its "
              "sd), read at equal length (AlpacaEval 2's idea).", "",
              *table_lines(labels, report["length_controlled_table"])]
    lines += ["", ("**Cycles:** " + "; ".join(" ≻ ".join(c + [c[0]]) for c in report["cycles"])
                   + " (last-iterate cycling: regularise towards π_0 or average iterates, "
                   "`eval.average_iterates: true`)")
              if report["cycles"] else "No cycle among the iterates.", ""]
    average = report.get("average")
    if average:
        lines += [f"**Iterate average** ({average['label']}, of {', '.join(average['of'])}): "
                  f"P({average['label']} ≻ {final}) = {average['vs_last']:.3f} (length-controlled "
                  f"{average['vs_last_length_controlled']:.3f}); the average "
                  + ("beats" if average["vs_last"] > 0.5 else "does not beat") + " the last iterate "
                  "head to head" + "".join(f"; {key.replace('_', ' ')} {average[key]:.4f} against "
                                           f"{average['last_' + key]:.4f} for {final}"
                                           for key in exact if key in average)
                  + ". (A less exploitable policy can still lose to one particular opponent: "
                  "exploitability is the worst case over all of them.)", ""]
    best = report.get("best_of_n")
    if best:
        lines += [f"**Best-of-{best['n']}** ({best['label']}): P({best['label']} ≻ {final}) = "
                  f"{best['vs_last']:.3f} (length-controlled {best['vs_last_length_controlled']:.3f}). "
                  + (f"It is reranked with the training judge ({best['judge']}), which is also the "
                     "judge of this table: judge exploitation compounds, so read it as an upper bound."
                     if best["uses_training_judge"] else
                     f"It is reranked by eval.rerank_judge ({best['judge']}), not the training judge."),
                  ""]
    lines += ["## Per iterate", "",
              "| iterate | length (tokens) | length (chars) | KL to pi_0 | vs pi_0 raw "
              "| vs pi_0 length-controlled |"
              + "".join(f" {key.replace('_', ' ')} |" for key in exact),
              "|---|---|---|---|---|---|" + "---|" * len(exact)]
    for p in report["per_iterate"]:
        lines.append(f"| {p['iterate']} | {p['mean_length_tokens']:.2f} | {p['mean_length_chars']:.1f} | "
                     f"{_number(p['kl_to_initial'], '.3f')} | {p['vs_initial']:.3f} | "
                     f"{p['vs_initial_length_controlled']:.3f} |"
                     + "".join(f" {_number(p.get(key), '.4f')} |" for key in exact))
    lines += ["", "## Per iteration", "",
              ("| iteration | steps | first loss | last loss | targets reached "
               "| winner / loser win rate | mean abs(P̂ − ½) trained on | indistinct prompts |"),
              "|---|---|---|---|---|---|---|---|"]
    for e in report["per_iteration"]:
        loss = e["loss"] or [float("nan")]
        wins = (f"{e['winner_win_rate']:.3f} / {e['loser_win_rate']:.3f}"
                if "winner_win_rate" in e else "-")
        reached = f"{e['target_reached']:.2f}" if "target_reached" in e else "-"
        lines.append(f"| {e['iteration']} | {len(e['loss'])} | {loss[0]:.4g} | {loss[-1]:.4g} | "
                     f"{reached} | {wins} | {_number(e.get('mean_abs_advantage'), '.3f')} | "
                     f"{_number(e.get('indistinct_share'), '.2f')} |")
    inconsistent = [e for e in report["per_iteration"] if "position_inconsistency" in e]
    if inconsistent:
        lines += ["", "Position inconsistency of the judge (share of pairs whose two orders disagree): "
                  + ", ".join(f"iteration {e['iteration']}: {e['position_inconsistency']:.3f}"
                              for e in inconsistent) + "."]
    if report["saturated_iterations"]:
        lines += ["", f"**Warning: win rates saturated** in iteration(s) "
                  f"{', '.join(map(str, report['saturated_iterations']))}: mean |P̂ − ½| of the samples "
                  f"trained on is below {report['saturation_threshold']}, so the judge barely tells the "
                  "samples apart and SPPO's gradient, −2η(P̂ − ½)∇log π(y), is vanishing. Try a "
                  "stronger judge, harder prompts, or more diverse sampling (more samples, higher "
                  "temperature)."]
    lines += [""] + [f"![{name}]({name})" for name in plots] + [""]
    return "\n".join(lines)
