"""One step of the Kuhn self-play demo (configs/kuhn_demo.yaml): games/s and turns/s with each round's
generation batched across every game waiting for a move, against the same games played one game at a
time (one generate call per move), on the demo's warm-started policy.

  game_selfplay_play: play only (games_per_step games), batched vs one game at a time.
  game_selfplay_step: the whole step (play, role-conditioned advantages, one update of the recipe's
                      own step, the online learner's: pg_kl with π_0's log-probs when kl_coef > 0), batched.

Compilation (the first call of each) is reported apart as compile_s.

    python tools/bench/game_selfplay.py [--games 128] [--sequential-games 16]
"""

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from common import emit, timings  # noqa: E402

from nash_jax import parallel, runs  # noqa: E402
from nash_jax.config import load_config  # noqa: E402
from nash_jax.recipes import game_selfplay as recipe  # noqa: E402
from nash_jax.engine import policy_files  # noqa: E402
from nash_jax.engine.learner import OnlineLearner, OnlineRecipe  # noqa: E402
from nash_jax.rollout.sampling import pad_id_of  # noqa: E402
from nash_jax.runs import RunDir  # noqa: E402
from nash_jax.tasks.games import games as games_lib  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--games", type=int, default=None, help="default: the demo's games_per_step")
    parser.add_argument("--sequential-games", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(ROOT / "configs" / "kuhn_demo.yaml", [f"run_dir={tmp}"])
        config = dataclasses.replace(config, imports=[])
        run = RunDir(tmp)
        (game,) = recipe.make_games(config)
        mesh = policy_files.make_mesh(config.mesh, config.train.micro_batches, {})
        tokenizer = policy_files.load_policy_tokenizer(config.model, run)
        recipe.warm_start(config, run, tokenizer, [game], mesh)
        n = args.games or config.game_selfplay.games_per_step
        rounds = iter(range(10_000))
        bench_play(config, run, game, tokenizer, mesh, n, rounds, args)
        bench_step(config, run, game, tokenizer, mesh, n, rounds, args.repeats)


def bench_play(config, run, game, tokenizer, mesh, n, rounds, args):
    """game_selfplay_play: n games batched against args.sequential_games played one at a time."""
    model = policy_files.load_policy(policy_files.initial_policy_dir(config.model.path, run), config.model, mesh)

    def player():
        return recipe.model_player(config, model, tokenizer, runs.stage_key(0, 0, "bench", next(rounds)),
                                   mesh)

    def batched():
        p = player()
        return games_lib.play([(game, (p, p))] * n, np.random.default_rng(next(rounds)))

    def one_at_a_time():
        p = player()
        rng = np.random.default_rng(next(rounds))
        return [r for _ in range(args.sequential_games) for r in games_lib.play([(game, (p, p))], rng)]

    turns = np.mean([len(r.turns) for r in batched()])
    compile_s, times = timings(batched, repeats=args.repeats)
    peer_compile_s, peer_times = timings(one_at_a_time, repeats=1)
    ours_s, peer_s = min(times), min(peer_times)
    games_per_s, peer_games_per_s = n / ours_s, args.sequential_games / peer_s
    emit(case="game_selfplay_play", game=game.name, games=n, mean_turns=round(float(turns), 3),
         games_per_s=round(games_per_s, 1), turns_per_s=round(games_per_s * turns, 1),
         time_s=round(ours_s, 3), compile_s=round(compile_s, 2),
         peer="the same games one at a time (one generate call per move)",
         peer_games=args.sequential_games, peer_games_per_s=round(peer_games_per_s, 2),
         peer_turns_per_s=round(peer_games_per_s * turns, 1),
         ratio=round(games_per_s / peer_games_per_s, 2), fraction_of_peak=None)


def bench_step(config, run, game, tokenizer, mesh, n, rounds, repeats):
    """game_selfplay_step: play n games, credit them and take one update of the recipe's own step."""
    g, planned = config.game_selfplay, recipe.plan_step(config, [game])
    online = OnlineLearner(config, run, mesh).build(OnlineRecipe(stage="bench", steps=100, shape=planned,
                                                                 rollout=None))
    holder = {"state": online.state, "baselines": np.zeros(2, np.float32)}
    played = {}

    def step():
        p = recipe.model_player(config, online.policy(holder["state"].params), tokenizer,
                                runs.stage_key(0, 0, "bench_step", next(rounds)), mesh)
        records = games_lib.play([(game, (p, p))] * n, np.random.default_rng(next(rounds)))
        trajectories, _, a, holder["baselines"] = recipe.trajectory_advantages(
            records, holder["baselines"], {game.name: 0}, mode=g.advantage, decay=g.rae_decay)
        rows = recipe.turn_rows(trajectories, a, gamma=g.gamma, drop_zero=True)
        batch = recipe.pg_batch(rows, pad_id_of(tokenizer),
                                parallel.data_shards(mesh) * config.train.micro_batches,
                                capacity=planned.rows, width=planned.length)  # as the recipe pads
        # the learner's update (π_0's log-probs for the KL penalty included)
        holder["state"], metrics = online.update(holder["state"], batch)
        float(metrics["loss"])
        played["turns"] = sum(len(r.turns) for r in records)

    compile_s, times = timings(step, repeats=repeats)
    step_s = min(times)
    emit(case="game_selfplay_step", game=game.name, games=n, step_s=round(step_s, 3),
         games_per_s=round(n / step_s, 1), turns_per_s=round(played["turns"] / step_s, 1),
         compile_s=round(compile_s, 2), objective=planned.objective, peer=None, ratio=None,
         fraction_of_peak=None)


if __name__ == "__main__":
    main()
