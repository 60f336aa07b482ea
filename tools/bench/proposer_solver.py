"""One step of the proposer-solver demo (configs/proposer_solver_demo.yaml): propose, solve, reward
(check, assemble, score, advantages, batch) and update (π_0's per-token log-probs for the KL penalty, then
the pg_kl step), each timed, with rollouts per second.

The warm start is fitted first (its own short run, `--warm-steps`, not timed); the first step (it
compiles the generate and update programs) is reported as `compile_s`, then `--repeats` further steps,
each on fresh sources and keys, give the median of every stage. No peer runs this recipe on this CPU
(R-Zero and SPICE run on GPU clusters under verl / Oat), so `peer` and `ratio` are null.

    python tools/bench/proposer_solver.py [--repeats 5] [--warm-steps 200]
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from common import emit
from nash_jax import runs
from nash_jax.setup import components
from nash_jax.config import load_config
from nash_jax.recipes import proposer_solver as ps
from nash_jax.setup.components import optimizer_config
from nash_jax.runs import RunDir
from nash_jax.selfplay import answer_sources
from nash_jax.train import init_train_state, make_optimizer, make_step

ROOT = Path(__file__).resolve().parents[2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warm-steps", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(ROOT / "configs" / "proposer_solver_demo.yaml",
                             [f"run_dir={tmp}/run", f"warm_start.steps={args.warm_steps}",
                              "imports=[nash_jax.recipes.proposer_solver]"])
        run = RunDir(config.run_dir)
        p = config.proposer_solver
        capacity = ps.rows_per_step(p)
        mesh = components.make_mesh(config, {"rows": capacity})
        tokenizer = components.load_policy_tokenizer(config, run)
        task = ps.task_data(config, run)
        ps.warm_start(config, run, tokenizer, mesh, task)
        game = ps.Game(config, tokenizer, mesh, answer_sources.answer_source(p.answer_source, p.task.name))
        model = components.load_policy(run / "init" / "policy", config, mesh)
        tx, schedule = make_optimizer(optimizer_config(config, p.steps))
        model_def, state, shardings = init_train_state(model, tx, mesh=mesh, seed=config.seed)
        kl = {"kl_coef": p.kl_coef} if p.kl_coef > 0 else {}  # as the recipe builds its step
        step_fn = make_step("pg_kl" if kl else "pg", model_def, tx, schedule, shardings, mesh,
                            clip_low=p.clip_low, clip_high=p.clip_high, aggregation=p.aggregation,
                            max_len=max(p.proposer_max_tokens, p.solver_max_tokens), **kl)
        reference = ps.reference_logprobs(model_def, ps._copy(state.params)) if kl else None
        held = ps.heldout_texts(task)
        timer = {}

        def timed(name, fn):
            def wrapped(*a, **k):
                start = time.perf_counter()
                out = fn(*a, **k)
                timer[name] = timer.get(name, 0.0) + time.perf_counter() - start
                return out
            return wrapped

        game.propose, game.solve = timed("propose", game.propose), timed("solve", game.solve)
        records = []
        for step in range(1 + args.repeats):
            timer.clear()
            start = time.perf_counter()
            rng = np.random.default_rng([config.seed, step])
            sources = [task.sources[i] for i in rng.choice(len(task.sources), p.sources_per_step,
                                                           replace=False)]
            policy = model_def.merge(state.params)
            rnd = ps.play(config, game, sources, policy, policy, step, held,
                          propose_key=runs.stage_key(config.seed, 0, "propose", step),
                          solve_key=runs.stage_key(config.seed, 0, "solve", step))
            rows, _ = ps.learner_rows(config, game, rnd, capacity, True, True)
            batch = ps.learner_batch(rows, tokenizer.pad_token_id, capacity)
            played = time.perf_counter() - start
            update_start = time.perf_counter()
            if reference is not None:  # log π_0 per token for the KL penalty: part of the update
                batch["ref_logp"] = reference(step_fn, batch)
            state, metrics = step_fn.jitted(state, step_fn.place_global(batch))
            jax.block_until_ready(metrics["loss"])
            update = time.perf_counter() - update_start
            total = time.perf_counter() - start
            solvers = sum(len(e.rollouts) - 1 for e in rnd.episodes)
            records.append({"propose_s": timer["propose"], "solve_s": timer.get("solve", 0.0),
                            "reward_s": played - timer["propose"] - timer.get("solve", 0.0),
                            "update_s": update, "step_s": total, "proposals": len(rnd.proposals),
                            "solver_rollouts": solvers, "rows": len(rows)})
        first, rest = records[0], records[1:]
        median = {k: statistics.median(r[k] for r in rest) for k in first}
        rollouts = median["proposals"] + median["solver_rollouts"]
        common = dict(jax_backend=jax.default_backend(), devices=len(jax.devices()), peer=None, ratio=None,
                      fraction_of_peak=None)
        for stage in ("propose", "solve", "reward", "update"):
            emit(case=f"proposer_solver_demo_{stage}", median_s=round(median[f"{stage}_s"], 4),
                 compile_s=round(first[f"{stage}_s"] - median[f"{stage}_s"], 3), **common)
        emit(case="proposer_solver_demo_step", median_step_s=round(median["step_s"], 4),
             compile_s=round(first["step_s"] - median["step_s"], 3),
             proposals=median["proposals"], solver_rollouts=median["solver_rollouts"],
             trained_rows=median["rows"], rollouts_per_s=round(rollouts / median["step_s"], 1),
             repeats=args.repeats, **common)


if __name__ == "__main__":
    main()
