"""The update and the loop around it: what one step trains (`plan_step`, which `nash-jax plan` sizes
too), the resumable training stage (play, credit, update, exact evaluation every `eval_every` steps,
snapshots), and a step's self-play statistics."""

import numpy as np

from nash_jax import parallel
from nash_jax.engine.learner import OnlineLearner, OnlineRecipe, Rollout, pg_step_shape
from nash_jax.parallel.padding import round_up
from nash_jax.recipes.game_selfplay.config import EVAL_STAGE, STAGE, make_games
from nash_jax.recipes.game_selfplay.credit import (pg_batch, trajectory_advantages, trajectory_turns,
                                                   turn_rows)
from nash_jax.recipes.game_selfplay.players import exact_metrics, model_player, move_entropy_bonuses
from nash_jax.runs.keys import stage_key
from nash_jax.rollout.sampling import pad_id_of
from nash_jax.tasks.games import games as games_lib


def train(config, run, text_games, tokenizer, evaluators, mesh):
    g = config.game_selfplay
    pad_id = pad_id_of(tokenizer)
    shape = plan_step(config, text_games)
    game_index = {t.name: i for i, t in enumerate(text_games)}
    shards = parallel.data_shards(mesh) * config.train.micro_batches
    prompt_width = round_up(config.data.max_prompt_tokens, 8)  # the player refuses longer prompts

    def evaluate(learner, step, params, extra):
        return exact_metrics(evaluators, learner.policy(params), mesh, pad_id), extra

    def rollout(learner, step, params, extra, item):
        policy = learner.policy(params)
        player = model_player(config, policy, tokenizer, stage_key(config.seed, 0, "play", step), mesh)
        tables = [(t, (player, player)) for t in text_games for _ in range(g.games_per_step)]
        records = games_lib.play(tables, learner.host_rng(step, "chance"))
        trajectories, rewards, a, baselines = trajectory_advantages(
            records, extra["baselines"], game_index, mode=g.advantage, decay=g.rae_decay)
        moves = trajectory_turns(trajectories)
        bonus, entropy = (move_entropy_bonuses(moves, policy, tokenizer, mesh, pad_id, g.entropy_coef,
                                               width=prompt_width) if g.entropy_coef > 0 else (None, None))
        rows = turn_rows(trajectories, a, gamma=g.gamma, drop_zero=g.drop_zero_advantage, bonus=bonus)
        batch = pg_batch(rows, pad_id, shards, capacity=shape.rows, width=shape.length) if rows else None
        metrics = {**play_metrics(records, text_games, rewards, a, len(rows)),
                   **entropy_metrics(moves, bonus, entropy),
                   **{f"baseline_{t.name}_seat{s}": baselines[game_index[t.name] * 2 + s]
                      for t in text_games for s in (0, 1)}}
        return Rollout(batch, metrics, {"baselines": baselines})

    OnlineLearner(config, run, mesh).train(OnlineRecipe(
        stage=STAGE, steps=g.steps, shape=shape, rollout=rollout, snapshots=g.snapshots,
        evaluate=evaluate if evaluators else None, eval_every=g.eval_every, eval_stage=EVAL_STAGE,
        extra={"baselines": np.zeros(2 * len(text_games), np.float32)}))


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


def entropy_metrics(moves, bonus, entropy):
    """The move-entropy bonus's statistics over the step's valid moves (`moves`: trajectory_turns;
    {} without the bonus, or without a valid move to average over)."""
    valid = np.array([turn.action is not None for _, turn in moves], bool)
    if bonus is None or not valid.any():
        return {}
    return {"move_entropy": float(entropy[valid].mean()),
            "entropy_bonus_abs_mean": float(np.abs(bonus[valid]).mean())}


def plan_step(config, text_games=None):
    """One update at its largest: every turn of games_per_step games of each game played to max_turns
    (the batch is the kept turns, bucketed up to that many: credit.pg_batch), each of
    data.max_prompt_tokens prompt tokens at most (the player refuses a longer prompt) and
    sampling.max_new_tokens response tokens."""
    g = config.game_selfplay
    turns = sum(g.games_per_step * t.max_turns for t in text_games or make_games(config))
    return pg_step_shape(g, rows=turns, max_len=config.sampling.max_new_tokens,
                         prompt_tokens=config.data.max_prompt_tokens)
