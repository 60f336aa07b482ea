"""The cross-iterate report in words and pictures: its markdown, its figures, and the lines
`nash-jax run` prints."""

import numpy as np

from nash_jax.reporting.writer import figure_lines, number, table_lines

STANDARD_PER_ITERATE = ("iterate", "mean_length_tokens", "mean_length_chars", "kl_to_initial",
                        "vs_initial", "vs_initial_length_controlled")


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


def draw_plots(figures, report, metrics):
    """The report's figures: the win-rate table, per-iterate metrics, loss curves, logged exact metrics."""
    labels = report["iterates"]
    figures.heat_map(report["win_rate_table"], labels, "P(row ≻ column) on held-out prompts", "win_rates.png")

    per = report["per_iterate"]
    keys = [("mean_length_tokens", "mean length (tokens)"), ("kl_to_initial", "KL(π_t ‖ π_0)")]
    keys += [(key, key.replace("_", " ")) for key in exact_keys(report)]
    fig, axes = figures.new(1, len(keys), figsize=(4 * len(keys), 3))
    for ax, (key, title) in zip(axes, keys):
        ax.plot(range(len(per)), [np.nan if p.get(key) is None else p[key] for p in per], marker="o")
        ax.set_xticks(range(len(per)), labels)
        ax.set_title(title)
    fig.tight_layout()
    figures.save(fig, "iterates.png")

    fig, ax = figures.new(figsize=(6, 3.5))
    for entry in report["per_iteration"]:
        if entry["loss"]:
            ax.plot(entry["steps"], entry["loss"], label=f"iteration {entry['iteration']}")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend()
    fig.tight_layout()
    figures.save(fig, "loss.png")

    for key in exact_keys(report):  # logged during training too: their curve over steps
        logged = [m for m in metrics if key in m]
        if logged:
            fig, ax = figures.new(figsize=(6, 3.5))
            ax.plot([m["step"] for m in logged], [m[key] for m in logged], marker=".")
            ax.set_xlabel("step")
            ax.set_ylabel(key.replace("_", " "))
            fig.tight_layout()
            figures.save(fig, f"{key}.png")


def exact_keys(report):
    """The per-iterate metrics beyond the standard ones (a task's exact metrics)."""
    return [k for k in report["per_iterate"][0] if k not in STANDARD_PER_ITERATE]


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
    """report.md: the headline, the tables, the extra rows, per iterate and per iteration, the figures."""
    return "\n".join([*_headline_and_tables(report), *_extra_row_lines(report), *_per_iterate_lines(report),
                      *_per_iteration_lines(report), "", *figure_lines(plots)])


def _duplicates(report):
    dropped = report.get("prompt_duplicates_dropped")
    return (f" ({dropped} repeated prompts were dropped before the split: no held-out prompt is a "
            "training prompt)") if dropped else ""


def _headline_and_tables(report):
    labels = report["iterates"]
    final = report["final_iterate"]
    lines = [f"# Run report: {report['recipe']} ({report['run_dir']})", "",
             f"Judge: {report['judge']}. {report['eval_prompts']} held-out prompts × "
             f"{report['samples_per_prompt']} samples per iterate{_duplicates(report)}.", "",
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
    return lines


def _extra_row_lines(report):
    final, exact, lines = report["final_iterate"], exact_keys(report), []
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
    return lines


def _per_iterate_lines(report):
    exact = exact_keys(report)
    lines = ["## Per iterate", "",
              "| iterate | length (tokens) | length (chars) | KL to pi_0 | vs pi_0 raw "
              "| vs pi_0 length-controlled |"
              + "".join(f" {key.replace('_', ' ')} |" for key in exact),
              "|---|---|---|---|---|---|" + "---|" * len(exact)]
    for p in report["per_iterate"]:
        lines.append(f"| {p['iterate']} | {p['mean_length_tokens']:.2f} | {p['mean_length_chars']:.1f} | "
                     f"{number(p['kl_to_initial'], '.3f')} | {p['vs_initial']:.3f} | "
                     f"{p['vs_initial_length_controlled']:.3f} |"
                     + "".join(f" {number(p.get(key), '.4f')} |" for key in exact))
    lines += ["", "KL to pi_0: Σ_t KL(π_t(·|x, y<t) ‖ π_0(·|x, y<t)), exact over the vocabulary at each "
              "token of π_t's own held-out samples, both at the sampling temperature, averaged over "
              "them (never negative; an unbiased estimate of the sequence KL)."]
    return lines


def _per_iteration_lines(report):
    lines = ["", "## Per iteration", "",
              ("| iteration | steps | first loss | last loss | targets reached "
               "| winner / loser win rate | mean abs(P̂ − ½) trained on | indistinct prompts |"),
              "|---|---|---|---|---|---|---|---|"]
    for e in report["per_iteration"]:
        loss = e["loss"] or [float("nan")]
        wins = (f"{e['winner_win_rate']:.3f} / {e['loser_win_rate']:.3f}"
                if "winner_win_rate" in e else "-")
        reached = f"{e['target_reached']:.2f}" if "target_reached" in e else "-"
        lines.append(f"| {e['iteration']} | {len(e['loss'])} | {loss[0]:.4g} | {loss[-1]:.4g} | "
                     f"{reached} | {wins} | {number(e.get('mean_abs_advantage'), '.3f')} | "
                     f"{number(e.get('indistinct_share'), '.2f')} |")
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
    return lines
