"""The report: a frozen-opponent tournament of every snapshot (against each other, π_0 and a random
player), cycles among them, exact metrics per iterate, exploitability over training, its plots, its
markdown, and the lines `nash-jax run` prints."""

import json

import numpy as np

from nash_jax.engine import policy_files
from nash_jax.runs.files import write_text_atomically
from nash_jax.recipes.game_selfplay.config import EVAL_STAGE, STAGE
from nash_jax.recipes.game_selfplay.players import exact_metrics, model_player
from nash_jax.evaluation.tables import find_cycles
from nash_jax.reporting import writer
from nash_jax.runs.keys import stage_key, stage_seed
from nash_jax.runs.metrics import read_metrics
from nash_jax.rollout.sampling import pad_id_of
from nash_jax.tasks.games import game_eval
from nash_jax.tasks.games import games as games_lib


def iterates(config, run):
    return [("pi_0", policy_files.initial_policy_dir(config.model.path, run))] + [
        (f"pi_{k + 1}", run / f"iter_{k}" / "policy") for k in range(config.game_selfplay.snapshots)]


def write_report(config, run, text_games, tokenizer, evaluators, mesh):
    g = config.game_selfplay
    pad_id = pad_id_of(tokenizer)
    labels = [label for label, _ in iterates(config, run)]
    tournament_path = run / "eval" / "tournament.json"
    if run.done("eval/tournament"):
        played = json.loads(tournament_path.read_text())
    else:
        models = [policy_files.load_policy(path, config.model, mesh) for _, path in iterates(config, run)]
        players = [(label, model_player(config, m, tokenizer,
                                        stage_key(config.seed, i, "tournament"), mesh))
                   for i, (label, m) in enumerate(zip(labels, models))]
        random = ("random", games_lib.RandomPlayer(stage_seed(config.seed, 0, "random_player")))
        counts, invalid = game_eval.tournament(
            text_games, players, players + [random], games_per_seat=g.eval_games,
            rng=np.random.default_rng(stage_seed(config.seed, 0, "tournament")))
        exact = {label: exact_metrics(evaluators, m, mesh, pad_id) for label, m in zip(labels, models)}
        final_policy = {name: e.model_metrics(models[-1], mesh, pad_id)[1]
                        for name, e in evaluators.items()}
        played = {"counts": counts, "invalid": invalid, "exact": exact, "policy": final_policy}
        write_text_atomically(tournament_path, json.dumps(played))
        run.finish("eval/tournament", ["eval/tournament.json"])
    report = build_report(config, run, text_games, labels, played)
    return writer.write_report(run, report, markdown=markdown,
                               draw=lambda figures: draw_plots(figures, report))


def build_report(config, run, text_games, labels, played):
    metrics = read_metrics(run / "metrics.jsonl")
    primary = next((t.name for t in text_games if t.name in played["policy"]), text_games[0].name)
    evals = [m for m in metrics if m["stage"] == EVAL_STAGE and "exploitability" in m]
    per_game = {}
    for t in text_games:
        counts = played["counts"][t.name]
        table = [[0.5 if a == b else game_eval.seat_averaged(counts[a][b]) for b in labels]
                 for a in labels]
        moves = played["invalid"][t.name]
        per_game[t.name] = {
            "win_rate_table": table,
            "cycles": find_cycles(np.array(table), labels),
            "frozen_opponents": {a: {b: {"seat0": counts[a][b][0], "seat1": counts[a][b][1],
                                         "win_rate": game_eval.seat_averaged(counts[a][b])}
                                     for b in [*labels, "random"]} for a in labels},
            "invalid_move_rate": {a: moves[a][0] / max(moves[a][1], 1) for a in labels},
            # in self-play: seat 0's win rate minus seat 1's
            "first_mover_asymmetry": {a: game_eval.win_rate(counts[a][a][0])
                                      - game_eval.win_rate(counts[a][a][1]) for a in labels},
        }
    steps = [m for m in metrics if m["stage"] == STAGE]
    return {
        "run_dir": str(run.path), "recipe": config.recipe, "game": primary,
        "games": [t.name for t in text_games], "advantage": config.game_selfplay.advantage,
        "iterates": labels,
        "exploitability": {"step": [m["step"] for m in evals],
                           "value": [m["exploitability"] for m in evals]},
        "per_iterate": [{"iterate": label, **played["exact"][label]} for label in labels],
        "policy": played["policy"].get(primary, {}),
        "per_game": per_game,
        "win_rate_table": per_game[primary]["win_rate_table"],
        "cycles": per_game[primary]["cycles"],
        "training": {"steps": [m["step"] for m in steps], "loss": [m["loss"] for m in steps],
                     "reward_mean": [m.get("reward_mean") for m in steps],
                     "invalid_rate": [m.get("invalid_rate") for m in steps],
                     # the legal-move policy's entropy at the moves played (None without entropy_coef)
                     "move_entropy": [m.get("move_entropy") for m in steps]},
    }


def summary(report):
    lines = []
    e = report["exploitability"]
    if e["value"]:
        lines.append(f"exploitability ({report['game']}): {e['value'][0]:.4f} at step {e['step'][0]} "
                     f"(warm start) -> {e['value'][-1]:.4f} at step {e['step'][-1]}")
    for name, game in report["per_game"].items():
        last = report["iterates"][-1]
        row = game["frozen_opponents"][last]
        lines.append(f"{name}: {last} win rate vs random {row['random']['win_rate']:.3f}, vs pi_0 "
                     f"{row['pi_0']['win_rate']:.3f}; invalid moves {game['invalid_move_rate'][last]:.3f}; "
                     f"first-mover asymmetry {game['first_mover_asymmetry'][last]:+.3f}")
        if game["cycles"]:
            lines.append(f"{name} cycles: " + "; ".join(" > ".join(c) for c in game["cycles"]))
    return lines


def draw_plots(figures, report):
    e = report["exploitability"]
    if e["step"]:
        fig, ax = figures.new(figsize=(6, 3.5))
        ax.plot(e["step"], e["value"], marker="o")
        ax.set_xlabel("step")
        ax.set_ylabel(f"exploitability ({report['game']})")
        ax.set_ylim(bottom=0)
        fig.tight_layout()
        figures.save(fig, "exploitability.png")
    figures.heat_map(report["win_rate_table"], report["iterates"],
                     f"{report['game']}: win rate of row vs column", "win_rates.png")
    t = report["training"]
    if t["steps"]:
        fig, axes = figures.new(1, 2, figsize=(10, 3.5))
        axes[0].plot(t["steps"], t["loss"])
        axes[0].set_title("pg loss")
        axes[1].plot(t["steps"], t["invalid_rate"])
        axes[1].set_title("invalid-move rate")
        for ax in axes:
            ax.set_xlabel("step")
        fig.tight_layout()
        figures.save(fig, "training.png")


def markdown(report, plots):
    labels = report["iterates"]
    e = report["exploitability"]
    lines = [f"# Run report: {report['recipe']} ({report['run_dir']})", "",
             f"Games: {', '.join(report['games'])}. Advantage: {report['advantage']}.", ""]
    if e["value"]:
        lines += [f"**Exploitability of {report['game']}: {e['value'][0]:.4f} (warm start) → "
                  f"{e['value'][-1]:.4f} (step {e['step'][-1]})**", "",
                  "| step | " + " | ".join(str(s) for s in e["step"]) + " |",
                  "|---" * (len(e["step"]) + 1) + "|",
                  "| exploitability | " + " | ".join(f"{v:.4f}" for v in e["value"]) + " |", ""]
    for name, game in report["per_game"].items():
        lines += [f"## {name}: frozen opponents", "",
                  "W/D/L per seat (seat 0; seat 1) and seat-averaged win rate (W + D/2)/games.", "",
                  "| iterate | " + " | ".join(f"vs {b}" for b in [*labels, "random"])
                  + " | invalid moves | first-mover asymmetry |",
                  "|---" * (len(labels) + 4) + "|"]
        for a in labels:
            cells = [game["frozen_opponents"][a][b] for b in [*labels, "random"]]
            lines.append(f"| {a} | " + " | ".join(
                f"{c['win_rate']:.2f} ({'/'.join(map(str, c['seat0']))}; {'/'.join(map(str, c['seat1']))})"
                for c in cells) + f" | {game['invalid_move_rate'][a]:.3f} | "
                f"{game['first_mover_asymmetry'][a]:+.3f} |")
        lines += ["", ("**Cycles:** " + "; ".join(" ≻ ".join(c + [c[0]]) for c in game["cycles"]))
                  if game["cycles"] else "No cycle among the snapshots.", ""]
    if report["per_iterate"] and len(report["per_iterate"][0]) > 1:
        keys = [k for k in report["per_iterate"][0] if k != "iterate"]
        lines += ["## Exact metrics per iterate", "", "| iterate | " + " | ".join(keys) + " |",
                  "|---" * (len(keys) + 1) + "|"]
        lines += [f"| {p['iterate']} | " + " | ".join(f"{p[k]:.4f}" for k in keys) + " |"
                  for p in report["per_iterate"]]
        lines.append("")
    lines += writer.figure_lines(plots)
    return "\n".join(lines)
