"""Zero-sum game self-play (SPIRAL, arXiv 2506.24119): one policy plays both seats of two-player
OpenSpiel games rendered as text (tasks/games/games.py). Each step:

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
              equilibrium instead of letting it cycle into a pure strategy (magnetic mirror descent);
              with entropy_coef > 0, each valid move's advantage gains an entropy bonus over the legal
              moves alone (adv.move_entropy_bonus; a uniform magnet that leaves the format free)

Anchors: the exact exploitability of the policy (Kuhn and Leduc poker; tasks/games/game_eval.py) every
`eval_every` steps; at the end, a frozen-opponent table of every snapshot against a uniformly random
player, the initial policy and the other snapshots (wins/draws/losses per seat, invalid-move rate,
first-mover asymmetry), and cycle detection across snapshots.

With `model.path: builtin:game` the initial policy is a tiny Llama warm-started (stage `init`) by a
supervised fit to uniformly random legal moves, with the games' own word-level tokenizer.

The modules, by concern: config (the section, its checks, the games, the stage names), credit
(advantages, turns, the batch), initial_policy (the tokenizer, π_0 and the warm start), players (the
policy as a player, its exact metrics), training (the step and the loop) and report.
"""

from nash_jax.engine import Recipe, register
from nash_jax.engine.registry import ONLINE_REFUSALS, SELF_PLAY_READS
from nash_jax.engine import preparation
from nash_jax.engine import policy_files
from nash_jax.recipes.game_selfplay.config import (EVAL_STAGE, STAGE, GameSelfPlayConfig,
                                                   check, make_games)
from nash_jax.recipes.game_selfplay.credit import (pg_batch, trajectory_advantages, trajectory_turns,
                                                   turn_rows)
from nash_jax.recipes.game_selfplay.initial_policy import demonstration_policy, warm_start
from nash_jax.recipes.game_selfplay.players import exact_metrics, model_player, move_entropy_bonuses
from nash_jax.recipes.game_selfplay.report import build_report, summary, write_report
from nash_jax.recipes.game_selfplay.training import plan_step, play_metrics, train
from nash_jax.tasks.games import game_eval
from nash_jax.tasks.games.prompt_lengths import check_every_prompt

# the names other modules, tools and tests use
__all__ = ["EVAL_STAGE", "STAGE", "GameSelfPlayConfig", "build_report", "check",
           "demonstration_policy", "exact_metrics", "make_games", "model_player",
           "move_entropy_bonuses", "pg_batch", "plan_step", "play_metrics", "run_game_selfplay", "summary",
           "train", "trajectory_advantages", "trajectory_turns", "turn_rows", "warm_start", "write_report"]


def run_game_selfplay(config, run):
    text_games = make_games(config)
    mesh = preparation.fitting_mesh(config)
    tokenizer = policy_files.load_policy_tokenizer(config.model, run)
    for game in text_games:  # every prompt's length, before the warm start
        check_every_prompt(game, tokenizer, config.data.max_prompt_tokens)
    if preparation.is_builtin(config):
        warm_start(config, run, tokenizer, text_games, mesh)
    evaluators = {t.name: e for t in text_games
                  if (e := game_eval.exact_evaluator(t, tokenizer)) is not None}
    if not run.done(STAGE):
        train(config, run, text_games, tokenizer, evaluators, mesh)
    return write_report(config, run, text_games, tokenizer, evaluators, mesh)


register(Recipe(name="game_selfplay", run=run_game_selfplay, section="game_selfplay",
                section_type=GameSelfPlayConfig, check=check, summary=summary,
                builtin_models=("builtin:game",), report_options=(),
                plan_step=plan_step,
                batch_sizes=lambda config: {"warm_start.batch_size": config.warm_start.batch_size},
                reads={**SELF_PLAY_READS, "sampling": {*SELF_PLAY_READS["sampling"], "max_new_tokens"}},
                refusals=ONLINE_REFUSALS))
