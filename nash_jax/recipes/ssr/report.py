"""The report: the anchors over the evaluation steps (held-out repair rate first), the count of each
first failed check, the solve-rate distribution, the saved anchor artifacts, the sandbox's
protections, its plot, its markdown, and the lines `nash-jax run` prints."""

import numpy as np

from nash_jax.engine import policy_files
from nash_jax.recipes.ssr.anchors import ARTIFACTS
from nash_jax.recipes.ssr.config import ANCHOR_STAGE, STAGE
from nash_jax.recipes.ssr.credit import FAILURES
from nash_jax.reporting import writer
from nash_jax.runs.metrics import read_metrics
from nash_jax.sandbox.sandbox import protections

ANCHOR_KEYS = ("heldout_repair_rate", "valid_artifact_rate", "valid_artifacts", "mean_solve_rate",
               "distinct_edits", "edit_distinct_2")


def anchor_table(config, metrics):
    records = sorted((m for m in metrics if m["stage"] == ANCHOR_STAGE), key=lambda m: m["step"])
    G = config.ssr.solvers_per_artifact
    anchors = {"step": [m["step"] for m in records], **{k: [m.get(k) for m in records] for k in ANCHOR_KEYS}}
    anchors["failed_checks"] = {name: [m.get(f"failed_{name}", 0.0) for m in records] for name in FAILURES}
    anchors["solve_rate_distribution"] = [[m.get(f"solve_rate_{k}_of_{G}", 0.0) for k in range(G + 1)]
                                          for m in records]
    return anchors


def write_report(config, run, task):
    b = config.ssr
    metrics = read_metrics(run / "metrics.jsonl")
    train = [m for m in metrics if m["stage"] == STAGE]
    anchors = anchor_table(config, metrics)
    wall, sandbox = (sum(m.get(k, 0.0) for m in train) for k in ("step_s", "sandbox_s"))
    saved = sorted(str(p.relative_to(run.path)) for p in (run / ARTIFACTS).glob("step_*/*") if p.is_dir())
    report = {"run_dir": str(run.path), "recipe": config.recipe,
              "repositories": {"train": [r.entry for r in task.train],
                               "heldout": [r.entry for r in task.heldout]},
              "heldout_bugs": len(task.heldout_bugs), "demonstrations": len(task.demonstrations),
              "solvers_per_artifact": b.solvers_per_artifact, "sandbox": protections(),
              # π_0: the warm start (a built-in model, or model.path fitted) or model.path itself
              "initial_policy": str(policy_files.initial_policy_dir(config.model.path, run)),
              "warm_start_examples": run.info("init").get("examples") if run.done("init") else None,
              # every protection that was off (isolation=best_effort on a machine without them)
              "sandbox_isolation": b.sandbox.isolation,
              "sandbox_off": [k for k, v in protections().items() if v is False],
              "anchors": anchors, "anchor_artifacts": saved,
              # of the training steps' wall time (their anchor evaluations in it), the share their
              # rounds spent in sandboxed test runs
              "sandbox_share_of_steps": sandbox / wall if wall else None,
              "training": {k: [m.get(k) for m in train] for k in
                           ("step", "loss", "valid_artifact_rate", "mean_solve_rate", "solver_reward",
                            "injector_reward", "step_s", "sandbox_s")}}
    return writer.write_report(run, report, markdown=markdown, draw=lambda f: draw_plots(f, report))


def draw_plots(figures, report):
    anchors = report["anchors"]
    fig, axes = figures.new(1, 3, figsize=(12, 3))
    for ax, key in zip(axes, ("heldout_repair_rate", "valid_artifact_rate", "mean_solve_rate")):
        ax.plot(anchors["step"], [np.nan if v is None else v for v in anchors[key]], marker="o")
        ax.set_title(key.replace("_", " "))
        ax.set_xlabel("step")
    fig.tight_layout()
    figures.save(fig, "anchors.png")


def initial_policy_line(report):
    if report["warm_start_examples"] is None:
        return f"π_0: {report['initial_policy']} as it is (no warm start)."
    return (f"π_0: the warm start, {report['initial_policy']}, fitted on {report['warm_start_examples']} "
            "demonstration examples of both roles.")


def markdown(report, plots):
    a = report["anchors"]
    keys = ["step", *ANCHOR_KEYS]
    lines = [f"# Run report: ssr ({report['run_dir']})", "",
             f"{len(report['repositories']['train'])} training repositories, "
             f"{len(report['repositories']['heldout'])} held out ({report['heldout_bugs']} held-out bugs), "
             f"{report['demonstrations']} demonstrations; sandbox: "
             + ", ".join(k for k, v in report["sandbox"].items() if v is True)
             + "; off: " + (", ".join(k for k, v in report["sandbox"].items() if v is False) or "none")
             + ".", "", initial_policy_line(report), "",
             "## Anchors over evaluation steps (step 0 = the warm start)", ""]
    lines += writer.markdown_table(keys, [[a[k][i] for k in keys] for i in range(len(a["step"]))])
    lines += ["", "## First failed check of the anchor artifacts", ""]
    lines += writer.markdown_table(["check", *(f"step {s}" for s in a["step"])],
                                   [[name, *counts] for name, counts in a["failed_checks"].items()])
    lines += ["", f"{len(report['anchor_artifacts'])} valid anchor artifacts saved (re-validate one with "
              "`nash-jax ssr-validate RUN_DIR/anchor_artifacts/step_N/KK_REPO`).", ""]
    lines += writer.figure_lines(plots)
    return "\n".join(lines)


def summary_lines(report):
    a = report["anchors"]

    def span(key):
        return writer.course(a.get(key, []), every=True)

    steps = ", ".join(str(s) for s in a["step"])
    return [f"anchor steps: {steps} (step 0 = the warm start)",
            f"held-out repair rate: {span('heldout_repair_rate')}",
            f"valid artifact rate: {span('valid_artifact_rate')}",
            f"mean solve rate: {span('mean_solve_rate')}",
            f"distinct edits: {span('distinct_edits')}",
            f"anchor artifacts saved: {len(report['anchor_artifacts'])}",
            f"share of training steps in the sandbox: {writer.cell(report['sandbox_share_of_steps'])}"]
