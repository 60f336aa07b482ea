"""Anchors, every `anchors.eval_every` steps (step 0 is the warm start) and at the end: the greedy
repair rate on the fixed held-out bugs (held-out repositories, never trained on), and, on fresh
artifacts for the fixed anchor repositories, the valid-artifact rate, the count of each first failed
check, the solve-rate distribution and the diversity of the injected edits. Every valid artifact of
an anchor step is saved as RUN_DIR/anchor_artifacts/step_N/KK_REPO (both diffs, test_files.txt,
repository, checks.json), which `nash-jax ssr-validate` re-validates."""

from nash_jax import parallel
from nash_jax.recipes.ssr.credit import round_metrics
from nash_jax.recipes.ssr.rounds import play
from nash_jax.runs.keys import stage_key
from nash_jax.selfplay.diversity import distinct_n
from nash_jax.tasks.code.ssr_artifact import write_artifact_dir

ARTIFACTS = "anchor_artifacts"


def evaluate_anchors(config, game, task, model, run, step):
    """{anchor metrics} of `model` at `step`; writes the step's valid artifacts."""
    a = config.ssr.anchors
    metrics = {"heldout_repair_rate": game.repair_rate(model, task.heldout_bugs,
                                                       stage_key(config.seed, 0, "anchor_heldout"))}
    rnd = play(config, game, task.anchor_repositories, model, step - 1,
               inject_key=stage_key(config.seed, 0, "anchor_inject", step),
               solve_key=stage_key(config.seed, 0, "anchor_solve", step),
               num_injectors=a.injectors_per_repository)
    metrics.update(round_metrics(config.ssr, rnd))
    valid = [(repo, verdict) for repo, _, verdict in rnd.records if verdict.valid]
    metrics.update(edit_diversity([v.artifact.bug_diff for _, v in valid]))
    metrics["valid_artifacts"] = float(len(valid))
    for k, (repo, verdict) in enumerate(valid if parallel.is_writer() else []):
        write_artifact_dir(run / ARTIFACTS / f"step_{step}" / f"{k:02d}_{repo.name}", verdict.artifact,
                           checks=verdict.validation.to_json())
    return metrics


def edited_lines(diff):
    """The lines a diff removes and adds (its edit, without context or headers)."""
    return [line for line in diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++ ", "--- "))]


def edit_diversity(bug_diffs):
    """distinct_edits: distinct edits / valid artifacts; edit_distinct_2: distinct-2 of their lines."""
    edits = ["\n".join(edited_lines(d)) for d in bug_diffs]
    return {"distinct_edits": len(set(edits)) / len(edits) if edits else 0.0,
            "edit_distinct_2": distinct_n(edits, 2)}
