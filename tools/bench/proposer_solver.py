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
from types import SimpleNamespace

import jax

from common import emit
from nash_jax import runs
from nash_jax.config import load_config
from nash_jax.recipes import proposer_solver as ps
from nash_jax.engine.learner import OnlineLearner, OnlineRecipe
from nash_jax.selfplay.two_role import rows_batch
from nash_jax.runs import RunDir
from nash_jax.selfplay import answer_sources
from nash_jax.engine import policy_files
ROOT = Path(__file__).resolve().parents[2]
STAGES = ("propose", "solve", "reward", "update")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warm-steps", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(ROOT / "configs" / "proposer_solver_demo.yaml",
                             [f"run_dir={tmp}/run", f"warm_start.steps={args.warm_steps}",
                              "imports=[nash_jax.recipes.proposer_solver]"])
        bench = set_up(config, RunDir(config.run_dir))
        state, records = bench.online.state, []
        for step in range(1 + args.repeats):
            state, record = one_step(config, bench, state, step)
            records.append(record)
    report(records, args.repeats)


def set_up(config, run):
    """The demo's warm-started policy, its game and the recipe's own step (the online learner's, the step
    `plan_step` describes: pg_kl with π_0's log-probs when kl_coef > 0), with the game's propose and
    solve calls timed into `timer`."""
    p = config.proposer_solver
    capacity = ps.rows_per_step(p)
    mesh = policy_files.make_mesh(config.mesh, config.train.micro_batches, {"rows": capacity})
    tokenizer = policy_files.load_policy_tokenizer(config.model, run)
    task = ps.task_data(config, run)
    ps.warm_start(config, run, tokenizer, mesh, task)
    game = ps.Game(config, tokenizer, mesh, answer_sources.answer_source(p.answer_source, p.task.name))
    step = ps.plan_step(config)
    online = OnlineLearner(config, run, mesh).build(OnlineRecipe(stage="bench", steps=p.steps, shape=step,
                                                                 rollout=None))
    timer = {}
    game.propose, game.solve = _timed(timer, "propose", game.propose), _timed(timer, "solve", game.solve)
    return SimpleNamespace(game=game, task=task, online=online, capacity=capacity, timer=timer,
                           held=ps.heldout_texts(task), pad_id=tokenizer.pad_token_id)


def _timed(timer, name, fn):
    def wrapped(*args, **kwargs):
        start_s = time.perf_counter()
        out = fn(*args, **kwargs)
        timer[name] = timer.get(name, 0.0) + time.perf_counter() - start_s
        return out
    return wrapped


def one_step(config, bench, state, step):
    """One training step on fresh sources and keys: (the new state, its stage times and counts)."""
    timer = bench.timer
    timer.clear()
    start_s = time.perf_counter()
    rng = bench.online.host_rng(step, "sources")
    sources = [bench.task.sources[i] for i in rng.choice(len(bench.task.sources),
                                                         config.proposer_solver.sources_per_step,
                                                         replace=False)]
    policy = bench.online.policy(state.params)
    rnd = ps.play(config, bench.game, sources, policy, policy, step, bench.held,
                  propose_key=runs.stage_key(config.seed, 0, "propose", step),
                  solve_key=runs.stage_key(config.seed, 0, "solve", step))
    rows, _ = ps.learner_rows(config, bench.game, rnd, bench.capacity, True, True)
    played = time.perf_counter() - start_s
    update_start = time.perf_counter()
    # the learner's update: π_0's log-probs for a KL penalty included; none without a trainable row
    state, metrics = bench.online.update(state, rows_batch(rows, bench.pad_id, bench.capacity))
    jax.block_until_ready(metrics)
    update = time.perf_counter() - update_start
    propose, solve = timer["propose"], timer.get("solve", 0.0)
    return state, {"propose_s": propose, "solve_s": solve, "reward_s": played - propose - solve,
                   "update_s": update, "step_s": time.perf_counter() - start_s,
                   "proposals": len(rnd.records), "rows": len(rows),
                   "solver_rollouts": sum(len(e.rollouts) - 1 for e in rnd.episodes)}


def report(records, repeats):
    """One JSON line per stage and one for the whole step: the median of the repeats, and the first
    step's excess as its compilation."""
    first, rest = records[0], records[1:]
    median = {k: statistics.median(r[k] for r in rest) for k in first}
    rollouts = median["proposals"] + median["solver_rollouts"]
    common = dict(jax_backend=jax.default_backend(), devices=len(jax.devices()), peer=None, ratio=None,
                  fraction_of_peak=None)
    for stage in STAGES:
        emit(case=f"proposer_solver_demo_{stage}", median_s=round(median[f"{stage}_s"], 4),
             compile_s=round(first[f"{stage}_s"] - median[f"{stage}_s"], 3), **common)
    emit(case="proposer_solver_demo_step", median_step_s=round(median["step_s"], 4),
         compile_s=round(first["step_s"] - median["step_s"], 3),
         proposals=median["proposals"], solver_rollouts=median["solver_rollouts"],
         trained_rows=median["rows"], rollouts_per_s=round(rollouts / median["step_s"], 1),
         repeats=repeats, **common)


if __name__ == "__main__":
    main()
