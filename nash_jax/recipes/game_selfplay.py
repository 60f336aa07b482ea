"""Zero-sum game self-play (SPIRAL, arXiv 2506.24119): one policy plays both seats of two-player
OpenSpiel games rendered as text (selfplay/games.py). Each step:

    play      games_per_step games of every configured game in parallel; each round, one batched
              generation for every game waiting for a move; every player-turn stays with its game
              until the game ends (invalid move: −1.5 / +0.5; too many turns: a draw)
    credit    per player-trajectory reward R; advantage `rae` (default): A = R − b[game, seat], then
              b ← decay·b + (1 − decay)·R in trajectory order (role-conditioned baselines, checkpointed
              with the train state); `grpo`: normalised within the two seats of one game; `none`: A = R
    turns     each turn of a trajectory gets A·γ^(turns of its player left); zero-advantage turns are
              dropped
    update    the `pg` objective (clipped policy gradient, behaviour log-probs from the sampler); with
              kl_coef > 0, `pg_kl`: a k3 KL towards π_0 on every trained token, which keeps the
              move format and, with a near-uniform π_0, pulls the last iterate towards a regularised
              equilibrium instead of letting it cycle into a pure strategy (magnetic mirror descent)

Anchors: the exact exploitability of the policy (Kuhn and Leduc poker; selfplay/game_eval.py) every
`eval_every` steps; at the end, a frozen-opponent table of every snapshot against a uniformly random
player, the initial policy and the other snapshots (wins/draws/losses per seat, invalid-move rate,
first-mover asymmetry), and cycle detection across snapshots.

With `model.path: builtin:game` the initial policy is a tiny Llama warm-started (stage `init`) by a
supervised fit to uniformly random legal moves, with the games' own word-level tokenizer.
"""

import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from nash_jax import components, parallel, rollouts, runs
from nash_jax.config import AT_LEAST_1, NON_NEGATIVE, PROBABILITY, Range
from nash_jax.core import advantages as adv
from nash_jax.models.tokenizer import load_tokenizer
from nash_jax.padding import bucket_size
from nash_jax.plan import StepShape
from nash_jax.recipes import Recipe, register
from nash_jax.recipes import preparation
from nash_jax.recipes.online import start
from nash_jax.report import find_cycles
from nash_jax.sampling import pad_id_of
from nash_jax.selfplay import game_eval
from nash_jax.selfplay import games as games_lib
from nash_jax.selfplay.episodes import Role, group_ids

STAGE = "game_selfplay"
EVAL_STAGE = "game_selfplay_eval"
BUILTIN_GAME = "builtin:game"  # model.path: a tiny Llama warm-started on the games' tokenizer


@dataclass(frozen=True)
class GameSelfPlayConfig:
    DOMAINS = {"steps": AT_LEAST_1, "games_per_step": AT_LEAST_1, "max_turns": AT_LEAST_1,
               "rae_decay": Range(0, 1, high_open=True), "gamma": Range(0, 1, low_open=True),
               "epochs": AT_LEAST_1, "clip_low": Range(0, 1), "clip_high": NON_NEGATIVE,
               "kl_coef": NON_NEGATIVE,
               "eval_every": AT_LEAST_1, "snapshots": AT_LEAST_1, "eval_games": AT_LEAST_1,
               "warm_start_jitter": PROBABILITY, "warm_start_repeat": PROBABILITY}
    games: list[str] = field(default_factory=lambda: ["kuhn_poker"])  # OpenSpiel names
    steps: int = 100
    games_per_step: int = 64  # of every game
    max_turns: int | None = None  # player turns before a draw; default: the game's longest play
    reward: Literal["outcome", "returns"] = "outcome"  # ±1/0 (SPIRAL) or OpenSpiel's returns (chips)
    invalid_penalty: float = -1.5
    invalid_bonus: float = 0.5
    advantage: Literal["rae", "grpo", "none"] = "rae"
    rae_decay: float = 0.95
    gamma: float = 1.0  # turn discount
    drop_zero_advantage: bool = True
    epochs: int = 1  # pg steps on each batch
    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = 0.0  # > 0: the pg_kl objective, a k3 KL penalty towards the initial policy π_0
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                         "drgrpo"] = "drgrpo"
    eval_every: int = 10  # steps between exact exploitability evaluations
    snapshots: int = 2  # policies exported as RUN_DIR/iter_k/policy, evenly spaced
    eval_games: int = 32  # per seat of every pairing in the frozen-opponent table
    warm_start_jitter: float = 0.5  # builtin:game's demonstrations: see demonstration_policy
    warm_start_repeat: float = 0.5  # share of warm-start states also asked to repeat the state


def check(config):
    g = config.game_selfplay
    if g.steps % g.snapshots:
        raise ValueError(f"game_selfplay.steps={g.steps} is not a multiple of game_selfplay.snapshots="
                         f"{g.snapshots}")
    if not g.games or len(set(g.games)) != len(g.games):
        raise ValueError(f"game_selfplay.games={g.games}; expected a non-empty list of distinct "
                         "OpenSpiel game names")
    make_games(config)  # unknown games fail here, before anything starts


def make_games(config):
    g = config.game_selfplay
    return [games_lib.TextGame(name, max_turns=g.max_turns, reward=g.reward,
                               invalid_penalty=g.invalid_penalty, invalid_bonus=g.invalid_bonus)
            for name in g.games]


# ---------------------------------------------------------------------------------------------------
# credit assignment


_rae = jax.jit(adv.rae_advantages, static_argnames=("decay", "sequential"))
_grpo = jax.jit(adv.group_advantages, static_argnames=("num_groups", "mode", "ddof", "eps"))


def trajectory_advantages(records, baselines, game_index, *, mode, decay):
    """Per player-trajectory (each seat of each game that moved, in game then seat order):
    → (trajectories [(record, seat)], rewards [n], advantages [n], new baselines [E]).

    rae: keys = game_index[game] · 2 + seat into `baselines` [E], updated in this order (SPIRAL);
    grpo: normalised among the trajectories of the same game (the two seats); none: A = R."""
    trajectories = [(r, seat) for r in records for seat in (0, 1) if r.seat_turns(seat)]
    rewards = np.array([r.rewards[seat] for r, seat in trajectories], np.float32)
    n = len(trajectories)
    if n == 0:
        return trajectories, rewards, rewards, baselines
    size = bucket_size(n)  # static shapes: one program per bucket
    padded = np.zeros(size, np.float32)
    padded[:n] = rewards
    mask = np.arange(size) < n
    if mode == "rae":
        keys = np.full(size, -1, np.int32)
        keys[:n] = [game_index[r.game.name] * 2 + seat for r, seat in trajectories]
        a, baselines = _rae(jnp.asarray(padded), jnp.asarray(keys), jnp.asarray(baselines),
                            jnp.asarray(mask), decay=decay)
    elif mode == "grpo":
        groups = np.full(size, -1, np.int32)
        groups[:n] = group_ids([Role.PLAYER] * n, [(r.game.name, r.index) for r, _ in trajectories])
        a = _grpo(jnp.asarray(padded), jnp.asarray(groups), jnp.asarray(mask), num_groups=size,
                  mode="grpo")
    else:
        a = padded
    return trajectories, rewards, np.asarray(a, np.float32)[:n], np.asarray(baselines, np.float32)


def turn_rows(trajectories, advantages, *, gamma, drop_zero):
    """[(Turn, advantage)] of every model turn: A·γ^(turns of the same player left)."""
    turns, per_turn, steps_from_end = [], [], []
    for (record, seat), a in zip(trajectories, advantages):
        mine = record.seat_turns(seat)
        turns += mine
        per_turn += [a] * len(mine)
        steps_from_end += range(len(mine) - 1, -1, -1)
    if not turns:
        return []
    values = np.asarray(adv.turn_discount(np.asarray(per_turn, np.float32),
                                          np.asarray(steps_from_end), gamma))
    return [(turn, float(value)) for turn, value in zip(turns, values)
            if turn.move.tokens is not None and not (drop_zero and value == 0.0)]


def pg_batch(rows, pad_id, shards):
    """The `pg` batch of turn rows [(turn, advantage)], padded to a bucketed size that divides over
    `shards` (rollouts.pg_batch)."""
    moves = [t.move for t, _ in rows]
    return rollouts.pg_batch([m.prompt_ids for m in moves], [m.tokens for m in moves],
                             [m.logprobs for m in moves], [a for _, a in rows], pad_id,
                             bucket_size(len(rows), multiple_of=shards))


# ---------------------------------------------------------------------------------------------------
# the run


def run_game_selfplay(config, run):
    g = config.game_selfplay
    text_games = make_games(config)
    mesh = preparation.fitting_mesh(config, {"warm_start.batch_size": config.warm_start.batch_size})
    tokenizer = load_tokenizer(tokenizer_dir(config, run))
    if config.model.path == BUILTIN_GAME:
        warm_start(config, run, tokenizer, text_games, mesh)
    evaluators = {t.name: e for t in text_games
                  if (e := game_eval.exact_evaluator(t, tokenizer)) is not None}
    if not run.done(STAGE):
        train(config, run, text_games, tokenizer, evaluators, mesh)
        run.finish(STAGE, [f"iter_{k}/policy" for k in range(g.snapshots)])
    return write_report(config, run, text_games, tokenizer, evaluators, mesh)


def tokenizer_dir(config, run):
    if config.model.tokenizer:
        return config.model.tokenizer
    return games_lib.TOKENIZER_DIR if config.model.path == BUILTIN_GAME else config.model.path


def initial_dir(config, run):
    return run / "init" / "policy" if config.model.path == BUILTIN_GAME else Path(config.model.path)


def warm_start(config, run, tokenizer, text_games, mesh):
    """Fit a tiny Llama to random legal moves of the configured games (stage `init`), drawn from
    `demonstration_policy`, and, for a share `warm_start_repeat` of the states, to repeating the
    information state when asked to: a tiny model fitted to near-uniform moves alone learns to ignore
    the state, and self-play then moves every state together."""
    if run.done("init"):
        return
    w, g = config.warm_start, config.game_selfplay
    model = preparation.tiny_llama(config, tokenizer)
    rng = np.random.default_rng(runs.stage_seed(config.seed, 0, "warm_start"))
    rows = []  # (prompt ids, response text)
    while len(rows) < w.steps * w.batch_size:
        game = text_games[len(rows) % len(text_games)]
        state = game.new_state(rng)
        while not state.is_terminal() and len(rows) < w.steps * w.batch_size:
            legal = state.legal_actions()
            action = int(rng.choice(legal, p=demonstration_policy(state, legal, g.warm_start_jitter)))
            rows.append((games_lib.encode_prompt(tokenizer, game.prompt(state)), game.words[action]))
            if rng.random() < g.warm_start_repeat:
                rows.append((games_lib.encode_prompt(tokenizer, game.prompt(state, "repeat")),
                             state.information_state_string()))
            state.apply_action(action)
            game.resolve_chance(state, rng)
    preparation.fit_demonstrations(config, run, model, rows, tokenizer, games_lib.TOKENIZER_DIR, mesh)


def demonstration_policy(state, legal, jitter):
    """The warm start's move probabilities at a state: uniform over the legal moves with weights
    1 + jitter·u, u ∈ [−1, 1] fixed per (information state, action) by a hash. Near uniform, but not
    the same at every state, so that the fit must read the state: imitating one distribution
    everywhere teaches a small model to ignore its input, which self-play cannot then undo in a few
    hundred steps."""
    key = state.information_state_string()
    u = np.array([np.random.default_rng([zlib.crc32(key.encode()), a]).uniform(-1, 1) for a in legal])
    weights = 1.0 + jitter * u
    return weights / weights.sum()


def model_player(config, model, tokenizer, key, mesh):
    s = config.sampling
    return games_lib.ModelPlayer(model, tokenizer, key=key, mesh=mesh, max_new_tokens=s.max_new_tokens,
                                 temperature=s.temperature, top_p=s.top_p, top_k=s.top_k)


def exact_metrics(evaluators, model, mesh, pad_id):
    """{exploitability (first exact game), exploitability_<game>, nash_conv_<game>, illegal_mass_<game>}."""
    out = {}
    for name, evaluator in evaluators.items():
        metrics, _ = evaluator.model_metrics(model, mesh, pad_id)
        out.setdefault("exploitability", metrics["exploitability"])
        out.update({f"{k}_{name}": v for k, v in metrics.items()})
    return out


def train(config, run, text_games, tokenizer, evaluators, mesh):
    g = config.game_selfplay
    pad_id = pad_id_of(tokenizer)
    step = plan_step(config, text_games)
    online = start(config, run, mesh, initial_dir=initial_dir(config, run),
                   tokenizer_dir=tokenizer_dir(config, run), objective=step.objective,
                   total_steps=g.steps * g.epochs, **step.hyperparameters)
    model_def, step_fn = online.model_def, online.step_fn
    reference = online.reference_logprobs() if g.kl_coef > 0 else None
    game_index = {t.name: i for i, t in enumerate(text_games)}
    shards = parallel.data_shards(mesh) * config.train.micro_batches
    per_snapshot = g.steps // g.snapshots

    def evaluate(step, params):
        if evaluators:
            run.log_metrics(EVAL_STAGE, step, exact_metrics(evaluators, model_def.merge(params), mesh,
                                                            pad_id))

    def work(step, state, extra, item):
        if step % g.eval_every == 0:
            evaluate(step, state.params)
        policy = model_def.merge(state.params)
        player = model_player(config, policy, tokenizer, runs.stage_key(config.seed, 0, "play", step),
                              mesh)
        tables = [(t, (player, player)) for t in text_games for _ in range(g.games_per_step)]
        records = games_lib.play(tables, np.random.default_rng(
            runs.stage_seed(config.seed, step, "chance")))
        trajectories, rewards, a, baselines = trajectory_advantages(
            records, extra["baselines"], game_index, mode=g.advantage, decay=g.rae_decay)
        rows = turn_rows(trajectories, a, gamma=g.gamma, drop_zero=g.drop_zero_advantage)
        if not rows:  # nothing to learn from: one masked row keeps the step (and the schedule) going
            rows = [(records[0].turns[0], 0.0)]
        batch = pg_batch(rows, pad_id, shards)
        if reference is not None:
            batch["ref_logp"] = reference(step_fn, batch)
        batch = step_fn.place_global(batch)
        for _ in range(g.epochs):
            state, metrics = step_fn.jitted(state, batch)
        metrics = {**metrics, **play_metrics(records, text_games, rewards, a, len(rows)),
                   **{f"baseline_{t.name}_seat{s}": baselines[game_index[t.name] * 2 + s]
                      for t in text_games for s in (0, 1)}}
        if (step + 1) % per_snapshot == 0:
            k = (step + 1) // per_snapshot - 1
            online.export(state.params, run / f"iter_{k}" / "policy")
        return state, {"baselines": baselines}, metrics

    state, _ = online.loop(STAGE, total=g.steps, work=work,
                           extra={"baselines": np.zeros(2 * len(text_games), np.float32)})
    evaluate(g.steps, state.params)


def play_metrics(records, text_games, rewards, advantages, kept):
    """Self-play statistics of one step's games."""
    turns = [t for r in records for t in r.turns]
    out = {"games": len(records), "turns": len(turns), "kept_turns": kept,
           "invalid_rate": float(np.mean([t.action is None for t in turns])),
           "truncated_rate": float(np.mean([r.truncated for r in records])),
           "reward_mean": float(rewards.mean()), "advantage_abs_mean": float(np.abs(advantages).mean())}
    for t in text_games:
        mine = [r for r in records if r.game is t]
        for seat in (0, 1):
            out[f"win_rate_{t.name}_seat{seat}"] = float(np.mean([r.result(seat) == "W" for r in mine]))
    return out


# ---------------------------------------------------------------------------------------------------
# the report


def iterates(config, run):
    return [("pi_0", initial_dir(config, run))] + [
        (f"pi_{k + 1}", run / f"iter_{k}" / "policy") for k in range(config.game_selfplay.snapshots)]


def write_report(config, run, text_games, tokenizer, evaluators, mesh):
    g = config.game_selfplay
    pad_id = pad_id_of(tokenizer)
    labels = [label for label, _ in iterates(config, run)]
    tournament_path = run / "eval" / "tournament.json"
    if run.done("eval/tournament"):
        played = json.loads(tournament_path.read_text())
    else:
        models = [components.load_policy(path, config, mesh) for _, path in iterates(config, run)]
        players = [(label, model_player(config, m, tokenizer,
                                        runs.stage_key(config.seed, i, "tournament"), mesh))
                   for i, (label, m) in enumerate(zip(labels, models))]
        random = ("random", games_lib.RandomPlayer(runs.stage_seed(config.seed, 0, "random_player")))
        counts, invalid = game_eval.tournament(
            text_games, players, players + [random], games_per_seat=g.eval_games,
            rng=np.random.default_rng(runs.stage_seed(config.seed, 0, "tournament")))
        exact = {label: exact_metrics(evaluators, m, mesh, pad_id) for label, m in zip(labels, models)}
        final_policy = {name: e.model_metrics(models[-1], mesh, pad_id)[1]
                        for name, e in evaluators.items()}
        played = {"counts": counts, "invalid": invalid, "exact": exact, "policy": final_policy}
        runs.write_text_atomically(tournament_path, json.dumps(played))
        run.finish("eval/tournament", ["eval/tournament.json"])
    report = build_report(config, run, text_games, labels, played)
    plots = draw_plots(report, run.path)
    runs.write_text_atomically(run / "report.json", json.dumps(report, indent=1))
    runs.write_text_atomically(run / "report.md", markdown(report, plots))
    run.finish("report", ["report.json", "report.md", *plots], leaf=True)
    return report


def build_report(config, run, text_games, labels, played):
    metrics = runs.read_metrics(run / "metrics.jsonl")
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
                     "invalid_rate": [m.get("invalid_rate") for m in steps]},
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


def draw_plots(report, directory):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []

    def save(fig, name):
        runs.write_atomically(Path(directory) / name, lambda tmp: fig.savefig(tmp, format="png", dpi=90))
        plt.close(fig)
        names.append(name)

    e = report["exploitability"]
    if e["step"]:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot(e["step"], e["value"], marker="o")
        ax.set_xlabel("step")
        ax.set_ylabel(f"exploitability ({report['game']})")
        ax.set_ylim(bottom=0)
        fig.tight_layout()
        save(fig, "exploitability.png")
    labels = report["iterates"]
    table = np.asarray(report["win_rate_table"])
    fig, ax = plt.subplots(figsize=(4 + 0.4 * len(labels), 3.5 + 0.4 * len(labels)))
    image = ax.imshow(table, vmin=0, vmax=1, cmap="RdBu_r")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_yticks(range(len(labels)), labels)
    for (a, b), value in np.ndenumerate(table):
        ax.text(b, a, f"{value:.2f}", ha="center", va="center", fontsize=8)
    ax.set_title(f"{report['game']}: win rate of row vs column")
    fig.colorbar(image)
    save(fig, "win_rates.png")
    t = report["training"]
    if t["steps"]:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
        axes[0].plot(t["steps"], t["loss"])
        axes[0].set_title("pg loss")
        axes[1].plot(t["steps"], t["invalid_rate"])
        axes[1].set_title("invalid-move rate")
        for ax in axes:
            ax.set_xlabel("step")
        fig.tight_layout()
        save(fig, "training.png")
    return names


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
    lines += [f"![{name}]({name})" for name in plots] + [""]
    return "\n".join(lines)


def plan_step(config, text_games=None):
    """One update at its largest: every turn of games_per_step games of each game played to max_turns
    (the batch is the kept turns, bucketed)."""
    g = config.game_selfplay
    turns = sum(g.games_per_step * t.max_turns for t in text_games or make_games(config))
    kl = {"kl_coef": g.kl_coef} if g.kl_coef > 0 else {}
    return StepShape("pg_kl" if kl else "pg",
                     dict(clip_low=g.clip_low, clip_high=g.clip_high, aggregation=g.aggregation,
                          max_len=config.sampling.max_new_tokens, **kl),
                     bucket_size(turns),
                     bucket_size(config.data.max_prompt_tokens + config.sampling.max_new_tokens, minimum=8))


register(Recipe(name="game_selfplay", run=run_game_selfplay, section="game_selfplay",
                section_type=GameSelfPlayConfig, check=check, summary=summary,
                builtin_models={BUILTIN_GAME: games_lib.TOKENIZER_DIR}, report_options=(),
                plan_step=plan_step))
