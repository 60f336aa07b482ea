"""The iterative SPPO recipe: for t = 0 … T−1, on the t-th disjoint prompt split,

    prompts   the split, chat template applied                    iter_t/prompts.parquet
    generate  K samples per prompt from π_t, with log π_t(y)      iter_t/samples.parquet
    judge     K×K preference matrices and win rates               iter_t/judgments.parquet
    build     winner + loser per prompt (or all K) as examples    iter_t/examples.parquet
    train     the SPPO (or SPPO-hard / DPO / IPO) objective,
              anchored to π_t, orbax checkpoints every N steps    iter_t/checkpoints/
    export    π_{t+1} as a Hugging Face directory                 iter_t/policy/
              (with model.lora: its adapters as a PEFT directory   iter_t/adapter/
              and the policy merged; π_{t+1} = the base with them)

then the evaluation and report (engine/iterates_report.py). Each stage is recorded in
RUN_DIR/manifest.json once
its artifact is in place; a rerun skips finished stages and resumes training from its last checkpoint.
"""

from dataclasses import dataclass
from typing import Literal

import numpy as np

from nash_jax import runs
from nash_jax.engine import judging, policy_files, prompt_sets
from nash_jax.config import AT_LEAST_1, POSITIVE
from nash_jax.core.saturation import win_rate_saturation
from nash_jax.engine import Recipe, register
from nash_jax.engine import iterates_report, planning
from nash_jax.engine.loop import fit_rows
from nash_jax.engine.preparation import prepare
from nash_jax.rollout import engines
from nash_jax.rollout.batches import token_batch
from nash_jax.rollout.sampling import pad_id_of
from nash_jax.tasks.synthetic import synthetic_eval
from nash_jax.train import objectives


@dataclass(frozen=True)
class SPPOConfig:
    DOMAINS = {"iterations": AT_LEAST_1, "eta": POSITIVE, "beta": POSITIVE}
    iterations: int = 3
    loss: Literal["sppo", "sppo_hard", "dpo", "ipo"] = "sppo"
    eta: float = 1000.0  # SPPO's η (the official scripts' 1/β)
    beta: float = 0.001  # the pairwise losses' β
    selection: Literal["winner_loser", "all"] = "winner_loser"


def run_sppo(config, run):
    mesh, tokenizer, splits, judge = prepare(config, run, prompt_blocks=config.sppo.iterations)
    if imported_adapter(config) and not run.done("initial"):  # π_0 = the base with that adapter
        policy_files.export_policy(load_iterate(config, run, 0, mesh), policy_dir(config, run, 0),
                                   tokenizer_dir=policy_files.tokenizer_source(config.model, run))
        run.finish("initial", ["initial/policy"])
    for t in range(config.sppo.iterations):
        iteration(config, run, t, splits.iterations[t], tokenizer, judge, mesh)
    return iterates_report.evaluate_and_write(
        config, run, iterates=iterates(config, run), eval_prompts=splits.eval, tokenizer=tokenizer,
        judge=judge, mesh=mesh, iterations=iteration_summaries(config, run),
        policy_metrics=synthetic_eval.policy_metrics(config.judge.kind, config.model.path, tokenizer,
                                                     mesh))


def iterates(config, run):
    """[(label, HF directory)]: π_0, then π_{t+1} exported by each iteration."""
    return [(f"pi_{t}", policy_dir(config, run, t)) for t in range(config.sppo.iterations + 1)]


def iteration_summaries(config, run):
    """Per iteration: the loss curve, the share of log-ratios that reached their target, the judged
    win rates of the winners and losers trained on, and their saturation (mean |P̂ − ½| of the samples
    trained on, share of prompts whose samples the judge cannot tell apart)."""
    metrics = runs.read_metrics(run / "metrics.jsonl")
    out = []
    for t in range(config.sppo.iterations):
        entry = {"iteration": t, **iterates_report.loss_curve(metrics, f"iter_{t}")}
        steps = [m for m in metrics if m["stage"] == f"iter_{t}" and "target_reached" in m]
        if steps:
            entry["target_reached"] = float(steps[-1]["target_reached"])
        judgments = run / f"iter_{t}" / "judgments.parquet"
        if judgments.is_file():
            judged = runs.read_table(judgments)
            wins = np.asarray(judged["win_rates"])
            entry["winner_win_rate"] = float(wins.max(axis=1).mean())
            entry["loser_win_rate"] = float(wins.min(axis=1).mean())
            k = wins.shape[1]
            pref = np.asarray(judged["matrix"]).reshape(len(wins), k, k)
            entry |= win_rate_saturation(pref, trained_mask(wins, config.sppo))
            if "position_inconsistency" in judged:  # the LLM judge's: pairs whose two orders disagree
                entry["position_inconsistency"] = float(np.mean(judged["position_inconsistency"]))
        out.append(entry)
    return out


def policy_dir(config, run, t):
    """π_t's HF directory: the initial policy for t = 0, else iteration t−1's export."""
    if t == 0:
        if imported_adapter(config):
            return run / "initial" / "policy"
        return policy_files.initial_policy_dir(config.model.path, run)
    return run / f"iter_{t - 1}" / "policy"


def imported_adapter(config):
    return config.model.lora is not None and config.model.lora.adapter is not None


def load_iterate(config, run, t, mesh):
    """π_t to train: its HF directory, or with model.lora the base with iteration t−1's adapters (at
    t = 0 the imported adapter, or B = 0): the anchor π_t is that policy, no second model."""
    if config.model.lora is None:
        return policy_files.load_policy(policy_dir(config, run, t), config.model, mesh)
    return policy_files.load_trainable_policy(
        policy_files.initial_policy_dir(config.model.path, run), config.model, mesh,
        seed=runs.stage_seed(config.seed, t, "lora"),
        adapter_dir=run / f"iter_{t - 1}" / "adapter" if t > 0 else None)


def iteration(config, run, t, prompts, tokenizer, judge, mesh):
    it = f"iter_{t}"
    if run.done(f"{it}/train"):
        return
    model = load_iterate(config, run, t, mesh)

    if not run.done(f"{it}/prompts"):
        ids, kept, skipped = prompt_sets.encode_prompts(config.data, tokenizer, prompts,
                                                   f"iteration {t}'s prompt split")
        runs.write_table(run / it / "prompts.parquet",
                           {"prompt": [prompts[i] for i in kept], "prompt_ids": ids})
        run.finish(f"{it}/prompts", [f"{it}/prompts.parquet"], prompts=len(ids), skipped=skipped)
    table = runs.read_table(run / it / "prompts.parquet")

    if not run.done(f"{it}/generate"):
        columns, info = engines.sample_policy(
            model, policy_dir(config, run, t), tokenizer, table["prompt_ids"],
            num_samples=config.sampling.num_samples, sampling=config.sampling, mesh=mesh,
            desc=f"{it} generate", key_of=lambda b: runs.stage_key(config.seed, t, "generate", b),
            crash_prefix=f"{it}/generate", work_dir=run / it / "vllm", dtype=config.model.dtype)
        runs.write_table(run / it / "samples.parquet", {**table, **columns})
        run.finish(f"{it}/generate", [f"{it}/samples.parquet"],
                   mean_length=float(np.mean(columns["lengths"])),
                   finished=float(np.mean(columns["finished"])), **info)
        engines.clean_up(run / it / "vllm")
    samples = runs.read_table(run / it / "samples.parquet")

    if not run.done(f"{it}/judge"):
        bar = runs.progress(len(samples["prompt"]), f"{it} judge", "prompt")
        notes = {}  # per-prompt figures of the judge (the LLM judge's position_inconsistency)
        pref = judging.judge_matrices(judge, samples["prompt"], samples["responses"],
                                     per_call=config.judge.prompts_per_call, bar=bar, crash_prefix=f"{it}/judge",
                                     where=f"judging iteration {t} ({run / it / 'samples.parquet'})",
                                     notes=notes)
        bar.close()
        runs.write_table(run / it / "judgments.parquet",
                           {"matrix": pref.reshape(len(pref), -1).tolist(),
                            "win_rates": pref.mean(axis=2).tolist(), **notes})
        run.finish(f"{it}/judge", [f"{it}/judgments.parquet"],
                   mean_max_win_rate=float(pref.mean(axis=2).max(axis=1).mean()),
                   **{name: float(np.mean(values)) for name, values in notes.items()})
    judgments = runs.read_table(run / it / "judgments.parquet")

    if not run.done(f"{it}/build"):
        rows = build_examples(samples, np.asarray(judgments["win_rates"]), config.sppo)
        runs.write_table(run / it / "examples.parquet",
                           {key: [r[key] for r in rows] for key in rows[0]})
        run.finish(f"{it}/build", [f"{it}/examples.parquet"], examples=len(rows))
    table = runs.read_table(run / it / "examples.parquet")
    rows = [dict(zip(table, values)) for values in zip(*table.values())]

    model = train(config, run, t, model, rows, mesh, tokenizer)
    policy_files.export_policy(model, run / it / "policy",
                             tokenizer_dir=policy_files.tokenizer_source(config.model, run))
    if config.model.lora is not None:
        policy_files.export_adapter(model, run / it / "adapter", config.model.lora,
                                    base_name=policy_files.adapter_base(config.model, run))
    run.finish(f"{it}/train", [f"{it}/policy"] + ([f"{it}/adapter"] if config.model.lora else []))


def pairwise(loss):
    """Whether objective `loss` trains on (winner, loser) pairs: its token fields are [N, 2, T] in the
    objective table (train/objectives.py), where the pointwise SPPO loss's are [N, T]."""
    return objectives.get(loss).token_shape == ("N", 2, "T")


def build_examples(samples, win_rates, sppo):
    """Training examples from each prompt's K samples and win rates [B, K].

    winner_loser keeps the highest and lowest win rate (the paper's choice; ties go to the earlier
    sample, and the loser is never the winner); all keeps every sample. Pairwise losses take
    (winner, loser) pairs."""
    rows = []
    for b, prompt_ids in enumerate(samples["prompt_ids"]):
        wins, responses, logp = win_rates[b], samples["response_ids"][b], samples["logp"][b]
        winner, loser = winner_and_loser(wins)
        if pairwise(sppo.loss):
            rows.append({"prompt_ids": prompt_ids, "chosen_ids": responses[winner],
                         "rejected_ids": responses[loser], "anchor_logp": [logp[winner], logp[loser]]})
            continue
        keep = [winner, loser] if sppo.selection == "winner_loser" else range(len(wins))
        rows.extend({"prompt_ids": prompt_ids, "response_ids": responses[k], "anchor_logp": logp[k],
                     "win_rate": float(wins[k])} for k in keep)
    return rows


def winner_and_loser(wins):
    """Indices of the highest and lowest win rate among one prompt's K (ties to the earlier sample;
    the loser is never the winner unless K = 1)."""
    winner = int(np.argmax(wins))
    others = [k for k in range(len(wins)) if k != winner] or [winner]
    return winner, min(others, key=lambda k: (wins[k], k))


def trained_mask(win_rates, sppo):
    """[B, K] bool: the samples that build_examples trains on."""
    mask = np.zeros(np.shape(win_rates), bool)
    for b, wins in enumerate(win_rates):
        if not pairwise(sppo.loss) and sppo.selection == "all":
            mask[b] = True
        else:
            mask[b, list(winner_and_loser(wins))] = True
    return mask


def pointwise_batch(rows, pad_id):
    """The `sppo` objective's batch: each example's tokens, π_t's log-prob and win rate."""
    out = token_batch([r["prompt_ids"] for r in rows], [r["response_ids"] for r in rows], pad_id)
    return {**out, "anchor_logp": np.array([r["anchor_logp"] for r in rows], np.float32),
            "win_rate": np.array([r["win_rate"] for r in rows], np.float32)}


def pair_batch(rows, pad_id):
    """A pairwise objective's batch: [N, 2, T] tokens of (winner, loser) and their π_t log-probs."""
    prompts = [r["prompt_ids"] for r in rows for _ in range(2)]
    responses = [r[k] for r in rows for k in ("chosen_ids", "rejected_ids")]
    out = token_batch(prompts, responses, pad_id)
    n = len(rows)
    return {**{k: v.reshape(n, 2, -1) for k, v in out.items()},
            "anchor_logp": np.array([r["anchor_logp"] for r in rows], np.float32)}


def train(config, run, t, model, rows, mesh, tokenizer):
    """π_{t+1}: π_t trained on the iteration's examples with the configured loss, anchored to π_t
    (its hyperparameters, eta or beta, are the section's fields the objective table names)."""
    pad_id, sppo, train_section = pad_id_of(tokenizer), config.sppo, config.train
    to_batch = pair_batch if pairwise(sppo.loss) else pointwise_batch
    hyperparameters = {h: getattr(sppo, h) for h in objectives.get(sppo.loss).hyperparameters}
    return fit_rows(run, f"iter_{t}", model, rows, objective=sppo.loss,
                    to_batch=lambda batch: to_batch(batch, pad_id), optimizer=train_section.optimizer,
                    batch_size=train_section.batch_size, epochs=train_section.epochs,
                    seed=runs.stage_seed(config.seed, t, "train"),
                    checkpoint_every=train_section.checkpoint_every, mesh=mesh,
                    micro_batches=train_section.micro_batches, logprob_chunk=train_section.logprob_chunk,
                    max_skipped_fraction=train_section.max_skipped_fraction, **hyperparameters)


def check(config):
    if config.sampling.num_samples < 2:
        raise ValueError(f"sampling.num_samples={config.sampling.num_samples}; expected ≥ 2 for SPPO "
                         "(win rates compare each prompt's samples with each other)")
    engines.check_engine(config.sampling)


register(Recipe(name="sppo", run=run_sppo, section="sppo", section_type=SPPOConfig, check=check,
                plan_step=planning.default_step,
                batch_sizes=lambda config: {"train.batch_size": config.train.batch_size}))
