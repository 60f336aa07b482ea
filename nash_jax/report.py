"""Evaluation across iterates and the run report (`nash-jax report RUN_DIR`, also the last stage of a run).

On held-out prompts, each iterate (the initial policy included) draws `eval.samples_per_prompt`
responses; sample m of every iterate forms one candidate list per prompt, so one `prob_matrix` call per
prompt and sample judges every pair of iterates at once. The table T[a, b] = mean P(π_a ≻ π_b) has 0.5
on its diagonal. Three iterates a ≻ b ≻ c ≻ a (each entry above 1/2) are flagged as a cycle.

Per iterate: mean response length (tokens, characters), KL(π_t ‖ π_0) estimated from π_t's own samples
as mean log π_t(y) − log π_0(y) (an unbiased estimate at temperature 1, top-p 1), and, on the synthetic
task, the exact exploitability under the oracle. Per iteration: the winners' and losers' mean win rates,
the fraction of examples whose log-ratio reached its target, and the loss curve.

Outputs: RUN_DIR/report.json, RUN_DIR/report.md and PNG plots beside it. Samples are cached in
RUN_DIR/eval/ as manifest stages, so re-running the report only judges and draws.
"""

import functools
import itertools
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nash_jax import parallel, runs
from nash_jax.config import BUILTIN_SYNTHETIC
from nash_jax.recipes import common
from nash_jax.sampling import pad_id_of
from nash_jax.tasks import synthetic


def iterates(config, run):
    """[(label, HF directory)] of every iterate: π_0, then each exported policy in order."""
    return [("pi_0", common.initial_policy_dir(config, run))] + [
        (f"pi_{t + 1}", run / f"iter_{t}" / "policy") for t in range(iteration_count(config))]


def iteration_count(config):
    """SPPO's iterations, or Nash-MD's exported snapshots: the iterates after π_0."""
    return config.sppo.iterations if config.recipe == "sppo" else config.nash_md.snapshots


def has_exact_exploitability(config):
    """Whether exploitability is exact: the synthetic task's policy judged by its own oracle."""
    return config.judge.kind == "synthetic" and config.model.path == BUILTIN_SYNTHETIC


def evaluate_and_write(config, run, eval_prompts, tokenizer, judge, mesh):
    """Sample every iterate on the held-out prompts, judge, and write report.json / report.md."""
    ids, kept, _ = common.encode_prompts(config, tokenizer, eval_prompts, "evaluation prompts")
    prompts = [eval_prompts[i] for i in kept]
    labelled = iterates(config, run)
    # π_0, loaded at most once, and only if some iterate's samples still need scoring under it
    initial_model = functools.cache(lambda: common.load_policy(labelled[0][1], config, mesh))
    samples = [eval_samples(config, run, i, path, ids, tokenizer, mesh, initial_model)
               for i, (_, path) in enumerate(labelled)]
    del initial_model  # free π_0 before judging
    table = win_rate_table(judge, prompts, [s["responses"] for s in samples], config.judge.prompts_per_call)
    second = None
    if config.eval.second_judge is not None:
        second_judge = common.make_judge(config.eval.second_judge, mesh)
        second = win_rate_table(second_judge, prompts, [s["responses"] for s in samples],
                                config.judge.prompts_per_call).tolist()
    metrics = runs.read_metrics(run / "metrics.jsonl")
    per_iterate = []
    for (label, _), s in zip(labelled, samples):
        entry = {"iterate": label,
                 "mean_length_tokens": float(np.mean(s["lengths"])),
                 "mean_length_chars": float(np.mean([len(r) for rs in s["responses"] for r in rs])),
                 "kl_to_initial": float(np.mean(np.subtract(s["logp"], s["logp_initial"])))}
        if "exploitability" in s:
            entry["exploitability"] = s["exploitability"]
        per_iterate.append(entry)
    report = {
        "run_dir": str(run.path), "recipe": config.recipe, "judge": config.judge.kind,
        "iterates": [label for label, _ in labelled],
        "win_rate_table": table.tolist(),
        "win_rate_table_second_judge": second,
        "final_vs_initial": float(table[-1, 0]),
        "cycles": find_cycles(table, [label for label, _ in labelled]),
        "per_iterate": per_iterate,
        "per_iteration": iteration_summaries(config, run, metrics),
        "eval_prompts": len(prompts), "samples_per_prompt": config.eval.samples_per_prompt,
    }
    runs.write_text_atomically(run / "report.json", json.dumps(report, indent=1))
    plots = draw_plots(report, metrics, run.path)
    runs.write_text_atomically(run / "report.md", markdown(report, plots))
    run.finish("report", ["report.json", "report.md", *plots])
    return report


def eval_samples(config, run, index, policy_path, prompt_ids, tokenizer, mesh, initial_model):
    """Iterate `index`'s held-out samples with log π_t and log π_0 (cached as stage eval/samples_i)."""
    stage, path = f"eval/samples_{index}", run / "eval" / f"samples_{index}.parquet"
    if run.done(stage):
        return common.read_table(path) | run.info(stage)
    model = common.load_policy(policy_path, config, mesh)
    columns = common.sample_rows(
        model, tokenizer, prompt_ids, num_samples=config.eval.samples_per_prompt, sampling=config.sampling,
        mesh=mesh, desc=f"eval pi_{index}", max_new_tokens=config.eval.max_new_tokens,
        key_of=lambda b: common.stage_key(config.seed, index, "eval", b))
    initial = model if index == 0 else initial_model()
    columns["logp_initial"] = sequence_logprobs(initial, prompt_ids, columns["response_ids"], tokenizer,
                                                mesh)
    info = {}
    if has_exact_exploitability(config):
        info["exploitability"] = synthetic_exploitability(model, prompt_ids, tokenizer, mesh)
    common.write_table(path, columns)
    run.finish(stage, [str(path.relative_to(run.path))], **info)
    return columns | info


def sequence_logprobs(model, prompt_ids, response_ids, tokenizer, mesh, per_call=64):
    """[B][K] Σ log π(response | prompt) under `model` (teacher forcing)."""
    from nash_jax.train import make_logprobs, split_model

    model_def, params = split_model(model)
    logprobs = make_logprobs(model_def, mesh)
    pad_id = pad_id_of(tokenizer)
    flat = [(p, r) for p, rs in zip(prompt_ids, response_ids) for r in rs]
    shards = parallel.data_shards(mesh)
    out = []
    for start in range(0, len(flat), per_call):
        chunk = flat[start:start + per_call]
        padded = chunk + [chunk[0]] * (-len(chunk) % shards)
        batch = common.token_batch([p for p, _ in padded], [r for _, r in padded], pad_id)
        values = logprobs.jitted(params, logprobs.place_global(batch))
        out.extend(parallel.gather_to_host(values)[:len(chunk)].tolist())
    k = len(response_ids[0])
    return [out[b * k:(b + 1) * k] for b in range(len(prompt_ids))]


def synthetic_exploitability(model, prompt_ids, tokenizer, mesh):
    """Exact mean exploitability under the synthetic oracle, from the first response token's
    distribution after each prompt."""
    from nash_jax.padding import bucket_size, left_pad

    shards = parallel.data_shards(mesh)
    width = bucket_size(max(len(p) for p in prompt_ids), minimum=8)
    rows = list(prompt_ids) + [prompt_ids[0]] * (-len(prompt_ids) % shards)
    tokens, segment_ids = left_pad(rows, width, pad_id_of(tokenizer))
    sharding = parallel.batch_sharding(mesh, 2)
    first = _next_token_logprobs(model, parallel.place_global_array(tokens, sharding),
                                 parallel.place_global_array(segment_ids, sharding))
    first = parallel.gather_to_host(first)[:len(prompt_ids)]
    return synthetic.mean_exploitability(synthetic.class_probabilities(first, tokenizer))


@nnx.jit
def _next_token_logprobs(model, tokens, segment_ids):
    logits, _ = model(tokens, segment_ids=segment_ids)
    return jax.nn.log_softmax(logits[:, -1].astype(jnp.float32))


def win_rate_table(judge, prompts, responses_per_iterate, per_call):
    """T[a, b] = mean over prompts and sample index of P(y_a ≻ y_b): one K = #iterates candidate list per
    prompt and sample index."""
    n = len(responses_per_iterate)
    samples = len(responses_per_iterate[0][0])
    total = np.zeros((n, n))
    for m in range(samples):
        candidates = [[responses_per_iterate[a][b][m] for a in range(n)] for b in range(len(prompts))]
        total += common.judge_matrices(judge, prompts, candidates, per_call=per_call,
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


def iteration_summaries(config, run, metrics):
    """Per training iteration (or Nash-MD segment): judged win rates, targets reached, loss curve."""
    out = []
    for t in range(iteration_count(config)):
        stage = f"iter_{t}" if config.recipe == "sppo" else "nash_md"
        steps = [m for m in metrics if m["stage"] == stage]
        if config.recipe == "nash_md":
            per = config.nash_md.steps // config.nash_md.snapshots
            steps = [m for m in steps if t * per < m["step"] <= (t + 1) * per]
        entry = {"iteration": t, "loss": [m["loss"] for m in steps],
                 "steps": [m["step"] for m in steps]}
        if steps and "target_reached" in steps[0]:
            entry["target_reached"] = float(steps[-1]["target_reached"])
        judgments = run / f"iter_{t}" / "judgments.parquet"
        if judgments.is_file():
            wins = np.asarray(common.read_table(judgments)["win_rates"])
            entry["winner_win_rate"] = float(wins.max(axis=1).mean())
            entry["loser_win_rate"] = float(wins.min(axis=1).mean())
        out.append(entry)
    return out


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
    if "exploitability" in per[0]:
        keys.append(("exploitability", "exploitability (oracle)"))
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

    exploit = [m for m in metrics if "exploitability" in m]
    if exploit:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot([m["step"] for m in exploit], [m["exploitability"] for m in exploit], marker=".")
        ax.set_xlabel("step")
        ax.set_ylabel("exploitability under the oracle")
        fig.tight_layout()
        save(fig, "exploitability.png")
    return names


def markdown(report, plots):
    labels = report["iterates"]
    exact = "exploitability" in report["per_iterate"][0]
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
              ("| iterate | length (tokens) | length (chars) | KL to pi_0 |"
               + (" exploitability |" if exact else "")),
              "|---|---|---|---|" + ("---|" if exact else "")]
    for p in report["per_iterate"]:
        lines.append(f"| {p['iterate']} | {p['mean_length_tokens']:.2f} | {p['mean_length_chars']:.1f} | "
                     f"{p['kl_to_initial']:.3f} |"
                     + (f" {p['exploitability']:.4f} |" if "exploitability" in p else ""))
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
