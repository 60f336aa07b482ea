"""The report: anchors over the evaluation steps, a table of solver snapshots against the held-out set
and against each other's problems, its plots, its markdown, and the lines `nash-jax run` prints."""

import numpy as np

from nash_jax.engine import policy_files
from nash_jax.recipes.proposer_solver.config import ANCHOR_STAGE, STAGE
from nash_jax.recipes.proposer_solver.task import heldout_texts
from nash_jax.reporting import writer
from nash_jax.runs.keys import stage_key
from nash_jax.runs.metrics import read_metrics


def snapshot_table(config, run, task, game, snapshots):
    """Per solver snapshot (π_0 first): greedy held-out accuracy, and accuracy on each snapshot's own
    valid proposals (made on the anchor sources; their true answers from the task's checker)."""
    ps = config.proposer_solver
    labels = ["step_0"] + [f"step_{(k + 1) * ps.steps // ps.anchors.snapshots}"
                           for k in range(len(snapshots))]
    paths = [policy_files.initial_policy_dir(config.model.path, run), *snapshots]
    held = heldout_texts(task)
    problems, accuracy = [], []
    for path in paths:
        model = policy_files.load_policy(path, config.model, game.mesh)
        _, _, texts = game.propose(model, task.anchor_sources, ps.anchors.proposals_per_source,
                                   stage_key(config.seed, 0, "snapshot_propose"))
        mine = {}
        for b, source in enumerate(task.anchor_sources):
            for text in texts[b]:
                p = game.check(source, text, "report", "snapshot table")
                if p.valid and p.checker is not None and p.problem not in held:
                    mine.setdefault(p.problem, p.checker)
        problems.append(sorted(mine.items()))
    key = stage_key(config.seed, 0, "snapshot_solve")
    for path in paths:
        model = policy_files.load_policy(path, config.model, game.mesh)
        held_out, *vs = game.accuracies(model, [task.heldout, *problems], key,
                                        f"snapshot table, solver {path}")
        accuracy.append({"heldout": held_out, "vs": vs})
    known = lambda v: None if np.isnan(v) else v  # noqa: E731  (no problem to score on)
    return {"labels": labels, "heldout_accuracy": [known(a["heldout"]) for a in accuracy],
            "cross_accuracy": [[known(v) for v in a["vs"]] for a in accuracy],
            "problems": [len(p) for p in problems]}


ANCHOR_KEYS = ("heldout_accuracy", "valid_proposal_rate", "mean_learnability", "distinct_2",
               "cluster_entropy", "novelty", "signal_share", "mean_p_hat", "unparsed_share")


def write_report(config, run, task, game, snapshots):
    ps = config.proposer_solver
    metrics = read_metrics(run / "metrics.jsonl")
    records = sorted((m for m in metrics if m["stage"] == ANCHOR_STAGE), key=lambda m: m["step"])
    keys = ANCHOR_KEYS + (("pseudo_label_accuracy",) if ps.answer_source == "majority" else ())
    anchors = {"step": [m["step"] for m in records], **{k: [m.get(k) for m in records] for k in keys}}
    M = ps.solvers_per_problem
    anchors["p_hat_distribution"] = [[m.get(f"p_hat_{k}_of_{M}", 0.0) for k in range(M + 1)]
                                     for m in records]
    train = [m for m in metrics if m["stage"] == STAGE]
    report = {"run_dir": str(run.path), "recipe": config.recipe, "task": ps.task.name,
              "answer_source": ps.answer_source, "proposer_reward": ps.proposer_reward,
              "schedule": ps.schedule, "anchors": anchors,
              "snapshots": snapshot_table(config, run, task, game, snapshots),
              "training": {k: [m.get(k) for m in train] for k in
                           ("step", "loss", "valid_proposal_rate", "mean_learnability",
                            "solver_reward", "signal_share")}}
    return writer.write_report(run, report, markdown=markdown,
                               draw=lambda figures: draw_plots(figures, report))


def draw_plots(figures, report):
    anchors = report["anchors"]
    keys = [k for k in (*ANCHOR_KEYS, "pseudo_label_accuracy") if k in anchors]
    cols = 3
    fig, axes = figures.new(-(-len(keys) // cols), cols, figsize=(12, 2.8 * -(-len(keys) // cols)))
    for ax, key in zip(axes.flat, keys):
        ax.plot(anchors["step"], [np.nan if v is None else v for v in anchors[key]], marker="o")
        ax.set_title(key.replace("_", " "))
        ax.set_xlabel("step")
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    fig.tight_layout()
    figures.save(fig, "anchors.png")
    fig, ax = figures.new(figsize=(6, 3.5))
    dist = np.asarray(anchors["p_hat_distribution"])
    M = dist.shape[1] - 1
    for k in range(M + 1):
        ax.plot(anchors["step"], dist[:, k], marker=".", label=f"p̂ = {k}/{M}")
    ax.set_xlabel("step")
    ax.set_ylabel("share of valid proposals")
    ax.legend(fontsize=7)
    fig.tight_layout()
    figures.save(fig, "p_hat.png")


def markdown(report, plots):
    a, s = report["anchors"], report["snapshots"]
    lines = [f"# Run report: proposer_solver ({report['run_dir']})", "",
             f"Task {report['task']}, answer source {report['answer_source']}, proposer reward "
             f"{report['proposer_reward']}, schedule {report['schedule']}.", "",
             "## Anchors over evaluation steps (step 0 = the warm start)", ""]
    keys = [k for k in a if k != "p_hat_distribution"]
    lines += writer.markdown_table(keys, [[a[k][i] for k in keys] for i in range(len(a["step"]))])
    lines += ["", "## Solver snapshots: accuracy on the held-out set and on each snapshot's problems", ""]
    lines += writer.markdown_table(
        ["solver", "held-out", *(f"problems of {l} (n={n})" for l, n in zip(s["labels"], s["problems"]))],
        [[label, held, *row] for label, held, row in zip(s["labels"], s["heldout_accuracy"],
                                                        s["cross_accuracy"])])
    lines += ["", "A later solver that does worse than an earlier one on the held-out set, or on the "
              "earlier proposer's problems, is a regression that self-play alone would not show.", ""]
    lines += writer.figure_lines(plots)
    return "\n".join(lines)


def summary_lines(report):
    a = report["anchors"]

    def span(key):
        return writer.course(a.get(key, []))

    lines = [f"held-out accuracy (warm start -> final): {span('heldout_accuracy')}",
             f"mean learnability: {span('mean_learnability')}",
             f"valid proposal rate: {span('valid_proposal_rate')}",
             f"distinct-2: {span('distinct_2')}"]
    if "pseudo_label_accuracy" in a:
        lines.append(f"pseudo-label accuracy: {span('pseudo_label_accuracy')}")
    return lines
