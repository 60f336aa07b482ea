"""The iterative SPPO recipe: for t = 0 … T−1, on the t-th disjoint prompt split,

    prompts   the split, chat template applied                    iter_t/prompts.parquet
    generate  K samples per prompt from π_t, with log π_t(y)      iter_t/samples.parquet
    judge     K×K preference matrices and win rates               iter_t/judgments.parquet
    build     winner + loser per prompt (or all K) as examples    iter_t/examples.parquet
    train     the SPPO (or SPPO-hard / DPO / IPO) objective,
              anchored to π_t, orbax checkpoints every N steps    iter_t/checkpoints/
    export    π_{t+1} as a Hugging Face directory                 iter_t/policy/

then the evaluation and report (nash_jax.report). Each stage is recorded in RUN_DIR/manifest.json once
its artifact is in place; a rerun skips finished stages and resumes training from its last checkpoint.
"""

from functools import partial

import numpy as np

from nash_jax import report
from nash_jax.recipes import common
from nash_jax.sampling import pad_id_of
from nash_jax.train.steps import make_pair_step, make_sppo_step


def run_sppo(config, run):
    mesh, tokenizer, splits, judge = common.prepare(config, run)
    for t in range(config.sppo.iterations):
        iteration(config, run, t, splits.iterations[t], tokenizer, judge, mesh)
    return report.evaluate_and_write(config, run, splits.eval, tokenizer, judge, mesh)


def policy_dir(config, run, t):
    """π_t's HF directory: the initial policy for t = 0, else iteration t−1's export."""
    return common.initial_policy_dir(config, run) if t == 0 else run / f"iter_{t - 1}" / "policy"


def iteration(config, run, t, prompts, tokenizer, judge, mesh):
    it = f"iter_{t}"
    if run.done(f"{it}/train"):
        return
    model = common.load_policy(policy_dir(config, run, t), config, mesh)

    if not run.done(f"{it}/prompts"):
        ids, kept, skipped = common.encode_prompts(config, tokenizer, prompts,
                                                   f"iteration {t}'s prompt split")
        common.write_table(run / it / "prompts.parquet",
                           {"prompt": [prompts[i] for i in kept], "prompt_ids": ids})
        run.finish(f"{it}/prompts", [f"{it}/prompts.parquet"], prompts=len(ids), skipped=skipped)
    table = common.read_table(run / it / "prompts.parquet")

    if not run.done(f"{it}/generate"):
        columns = common.sample_rows(
            model, tokenizer, table["prompt_ids"], num_samples=config.sampling.num_samples,
            sampling=config.sampling, mesh=mesh, desc=f"{it} generate",
            key_of=lambda b: common.stage_key(config.seed, t, "generate", b), crash_prefix=f"{it}/generate")
        common.write_table(run / it / "samples.parquet", {**table, **columns})
        run.finish(f"{it}/generate", [f"{it}/samples.parquet"],
                   mean_length=float(np.mean(columns["lengths"])),
                   finished=float(np.mean(columns["finished"])))
    samples = common.read_table(run / it / "samples.parquet")

    if not run.done(f"{it}/judge"):
        bar = common.progress(len(samples["prompt"]), f"{it} judge", "prompt")
        pref = common.judge_matrices(judge, samples["prompt"], samples["responses"],
                                     per_call=config.judge.prompts_per_call, bar=bar, crash_prefix=f"{it}/judge",
                                     where=f"judging iteration {t} ({run / it / 'samples.parquet'})")
        bar.close()
        common.write_table(run / it / "judgments.parquet",
                           {"matrix": pref.reshape(len(pref), -1).tolist(),
                            "win_rates": pref.mean(axis=2).tolist()})
        run.finish(f"{it}/judge", [f"{it}/judgments.parquet"],
                   mean_max_win_rate=float(pref.mean(axis=2).max(axis=1).mean()))
    judgments = common.read_table(run / it / "judgments.parquet")

    if not run.done(f"{it}/build"):
        rows = build_examples(samples, np.asarray(judgments["win_rates"]), config.sppo)
        common.write_table(run / it / "examples.parquet",
                           {key: [r[key] for r in rows] for key in rows[0]})
        run.finish(f"{it}/build", [f"{it}/examples.parquet"], examples=len(rows))
    table = common.read_table(run / it / "examples.parquet")
    rows = [dict(zip(table, values)) for values in zip(*table.values())]

    model = train(config, run, t, model, rows, mesh, tokenizer)
    common.export_policy(model, run / it / "policy", tokenizer_dir=common.tokenizer_source(config, run))
    run.finish(f"{it}/train", [f"{it}/policy"])


def build_examples(samples, win_rates, sppo):
    """Training examples from each prompt's K samples and win rates [B, K].

    winner_loser keeps the highest and lowest win rate (the paper's choice; ties go to the earlier
    sample, and the loser is never the winner); all keeps every sample. Pairwise losses take
    (winner, loser) pairs."""
    rows = []
    for b, prompt_ids in enumerate(samples["prompt_ids"]):
        wins = win_rates[b]
        winner = int(np.argmax(wins))
        others = [k for k in range(len(wins)) if k != winner] or [winner]
        loser = min(others, key=lambda k: (wins[k], k))
        if sppo.loss != "sppo":
            rows.append({"prompt_ids": prompt_ids,
                         "chosen_ids": samples["response_ids"][b][winner],
                         "rejected_ids": samples["response_ids"][b][loser],
                         "anchor_logp": [samples["logp"][b][winner], samples["logp"][b][loser]]})
            continue
        keep = [winner, loser] if sppo.selection == "winner_loser" else range(len(wins))
        rows.extend({"prompt_ids": prompt_ids, "response_ids": samples["response_ids"][b][k],
                     "anchor_logp": samples["logp"][b][k], "win_rate": float(wins[k])} for k in keep)
    return rows


def train(config, run, t, model, rows, mesh, tokenizer):
    pad_id = pad_id_of(tokenizer)
    sppo = config.sppo
    if sppo.loss == "sppo":
        make_step = partial(make_sppo_step, eta=sppo.eta, micro_batches=config.train.micro_batches)

        def to_batch(batch):
            out = common.token_batch([r["prompt_ids"] for r in batch],
                                     [r["response_ids"] for r in batch], pad_id)
            return {**out, "anchor_logp": np.array([r["anchor_logp"] for r in batch], np.float32),
                    "win_rate": np.array([r["win_rate"] for r in batch], np.float32)}
    else:
        make_step = partial(make_pair_step, loss=sppo.loss, beta=sppo.beta,
                            micro_batches=config.train.micro_batches)

        def to_batch(batch):
            prompts = [r["prompt_ids"] for r in batch for _ in range(2)]
            responses = [r[k] for r in batch for k in ("chosen_ids", "rejected_ids")]
            out = common.token_batch(prompts, responses, pad_id)
            n = len(batch)
            return {**{k: v.reshape(n, 2, -1) for k, v in out.items()},
                    "anchor_logp": np.array([r["anchor_logp"] for r in batch], np.float32)}

    return common.train_loop(
        run, f"iter_{t}", model, rows, make_step=make_step, to_batch=to_batch,
        optimizer=common.optimizer_config(config, 1), batch_size=config.train.batch_size,
        epochs=config.train.epochs, seed=common.stage_seed(config.seed, t, "train"),
        checkpoint_every=config.train.checkpoint_every, mesh=mesh)
