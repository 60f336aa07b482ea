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

Outputs: RUN_DIR/report.json, RUN_DIR/report.md and PNG plots beside it. Samples are cached in
RUN_DIR/eval/ as manifest stages, so re-running the report only judges and draws.
"""

import functools
import itertools
import json
from pathlib import Path

import numpy as np

from nash_jax import components, runs
from nash_jax.judges.base import judge_in_chunks
from nash_jax.rollouts import sample_rows, sequence_logprobs

STANDARD_PER_ITERATE = ("iterate", "mean_length_tokens", "mean_length_chars", "kl_to_initial")


def evaluate_and_write(config, run, *, iterates, eval_prompts, tokenizer, judge, mesh, iterations,
                       policy_metrics=None):
    """Sample every iterate on the held-out prompts, judge, and write report.json / report.md.

    iterates: [(label, HF directory)], π_0 first; iterations: the recipe's per-iteration summaries
    ({"iteration", "steps", "loss", ...}, see `loss_curve`); policy_metrics(model, prompt_ids) -> {name:
    value}: exact metrics of a policy where its task has them (the synthetic task's exploitability)."""
    ids, kept, _ = components.encode_prompts(config, tokenizer, eval_prompts, "evaluation prompts")
    prompts = [eval_prompts[i] for i in kept]
    # π_0, loaded at most once, and only if some iterate's samples still need scoring under it
    initial_model = functools.cache(lambda: components.load_policy(iterates[0][1], config, mesh))
    samples = [eval_samples(config, run, i, path, ids, tokenizer, mesh, initial_model, policy_metrics)
               for i, (_, path) in enumerate(iterates)]
    del initial_model  # free π_0 before judging
    table = win_rate_table(judge, prompts, [s["responses"] for s in samples], config.judge.prompts_per_call)
    second = None
    if config.eval.second_judge is not None:
        second_judge = components.make_judge(config.eval.second_judge, mesh)
        second = win_rate_table(second_judge, prompts, [s["responses"] for s in samples],
                                config.judge.prompts_per_call).tolist()
    metrics = runs.read_metrics(run / "metrics.jsonl")
    per_iterate = []
    for (label, _), s in zip(iterates, samples):
        entry = {"iterate": label,
                 "mean_length_tokens": float(np.mean(s["lengths"])),
                 "mean_length_chars": float(np.mean([len(r) for rs in s["responses"] for r in rs])),
                 "kl_to_initial": float(np.mean(np.subtract(s["logp"], s["logp_initial"]))),
                 **s["exact"]}
        per_iterate.append(entry)
    labels = [label for label, _ in iterates]
    report = {
        "run_dir": str(run.path), "recipe": config.recipe, "judge": config.judge.kind,
        "iterates": labels,
        "win_rate_table": table.tolist(),
        "win_rate_table_second_judge": second,
        "final_vs_initial": float(table[-1, 0]),
        "cycles": find_cycles(table, labels),
        "per_iterate": per_iterate,
        "per_iteration": iterations,
        "eval_prompts": len(prompts), "samples_per_prompt": config.eval.samples_per_prompt,
    }
    runs.write_text_atomically(run / "report.json", json.dumps(report, indent=1))
    plots = draw_plots(report, metrics, run.path)
    runs.write_text_atomically(run / "report.md", markdown(report, plots))
    run.finish("report", ["report.json", "report.md", *plots])
    return report


def eval_samples(config, run, index, policy_path, prompt_ids, tokenizer, mesh, initial_model,
                 policy_metrics=None):
    """Iterate `index`'s held-out samples with log π_t and log π_0, and its exact metrics (cached as
    stage eval/samples_i, the metrics in the stage's info)."""
    stage, path = f"eval/samples_{index}", run / "eval" / f"samples_{index}.parquet"
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


def win_rate_table(judge, prompts, responses_per_iterate, per_call):
    """T[a, b] = mean over prompts and sample index of P(y_a ≻ y_b): one K = #iterates candidate list per
    prompt and sample index."""
    n = len(responses_per_iterate)
    samples = len(responses_per_iterate[0][0])
    total = np.zeros((n, n))
    for m in range(samples):
        candidates = [[responses_per_iterate[a][b][m] for a in range(n)] for b in range(len(prompts))]
        total += judge_in_chunks(judge, prompts, candidates, per_call=per_call,
                                 where=f"evaluation sample {m}").mean(axis=0)
    return total / samples


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
    lines = [f"final_vs_initial: {report['final_vs_initial']:.3f}"]
    for entry in report["per_iterate"]:
        extra = "".join(f"  {key.replace('_', ' ')} {entry[key]:.4f}" for key in exact_keys(report))
        lines.append(f"{entry['iterate']}: length {entry['mean_length_tokens']:.2f} tokens, KL to pi_0 "
                     f"{entry['kl_to_initial']:.3f}{extra}")
    if report["cycles"]:
        lines.append("cycles: " + "; ".join(" > ".join(c) for c in report["cycles"]))
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
        ax.plot(range(len(per)), [p[key] for p in per], marker="o")
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


def markdown(report, plots):
    labels = report["iterates"]
    exact = exact_keys(report)
    lines = [f"# Run report: {report['recipe']} ({report['run_dir']})", "",
             f"Judge: {report['judge']}. {report['eval_prompts']} held-out prompts × "
             f"{report['samples_per_prompt']} samples per iterate.", "",
             f"**final_vs_initial = {report['final_vs_initial']:.3f}** (P({labels[-1]} ≻ pi_0))", "",
             "## Win rates, P(row ≻ column)", "",
             "| | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for label, row in zip(labels, report["win_rate_table"]):
        lines.append(f"| {label} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    lines += ["", ("**Cycles:** " + "; ".join(" ≻ ".join(c + [c[0]]) for c in report["cycles"])
                   + " (last-iterate cycling: regularise towards π_0 or average iterates)")
              if report["cycles"] else "No cycle among the iterates.", "",
              "## Per iterate", "",
              "| iterate | length (tokens) | length (chars) | KL to pi_0 |"
              + "".join(f" {key.replace('_', ' ')} |" for key in exact),
              "|---|---|---|---|" + "---|" * len(exact)]
    for p in report["per_iterate"]:
        lines.append(f"| {p['iterate']} | {p['mean_length_tokens']:.2f} | {p['mean_length_chars']:.1f} | "
                     f"{p['kl_to_initial']:.3f} |" + "".join(f" {p[key]:.4f} |" for key in exact))
    lines += ["", "## Per iteration", "",
              ("| iteration | steps | first loss | last loss | targets reached "
               "| winner / loser win rate |"), "|---|---|---|---|---|---|"]
    for e in report["per_iteration"]:
        loss = e["loss"] or [float("nan")]
        wins = (f"{e['winner_win_rate']:.3f} / {e['loser_win_rate']:.3f}"
                if "winner_win_rate" in e else "-")
        reached = f"{e['target_reached']:.2f}" if "target_reached" in e else "-"
        lines.append(f"| {e['iteration']} | {len(e['loss'])} | {loss[0]:.4g} | {loss[-1]:.4g} | "
                     f"{reached} | {wins} |")
    lines += [""] + [f"![{name}]({name})" for name in plots] + [""]
    return "\n".join(lines)
