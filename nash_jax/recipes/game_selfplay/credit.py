"""Credit for a step's games: a reward per player-trajectory, its advantage (role-conditioned RAE
baselines, GRPO within a game, or none), spread over the trajectory's turns with a discount, and the
policy-gradient batch of the turns kept."""

import jax
import jax.numpy as jnp
import numpy as np

from nash_jax.rollout import batches as rollouts
from nash_jax.core import advantages as adv
from nash_jax.parallel.padding import bucket_size, round_up
from nash_jax.selfplay.episodes import Role, group_ids


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


def trajectory_turns(trajectories):
    """[(TextGame, Turn)] of every turn of `trajectories`, in the order turn_rows reads them."""
    return [(record.game, turn) for record, seat in trajectories for turn in record.seat_turns(seat)]


def turn_rows(trajectories, advantages, *, gamma, drop_zero, bonus=None):
    """[(Turn, advantage)] of every model turn: A·γ^(turns of the same player left), plus bonus [n]
    (one value per turn of trajectory_turns, e.g. the move-entropy bonus; None: none)."""
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
    if bonus is not None:
        values = values + np.asarray(bonus, np.float32)
    return [(turn, float(value)) for turn, value in zip(turns, values)
            if turn.move.tokens is not None and not (drop_zero and value == 0.0)]


def pg_batch(rows, pad_id, shards, *, capacity, width):
    """The `pg` batch of turn rows [(turn, advantage)] of `width` tokens (rollouts.pg_batch), padded to
    a power of two that divides over `shards`, or to `capacity` (the most turns a step can make,
    rounded up to `shards`) when that is smaller: 33 turns of 48 at most train as 48 rows, not 64."""
    moves = [t.move for t, _ in rows]
    return rollouts.pg_batch([m.prompt_ids for m in moves], [m.tokens for m in moves],
                             [m.logprobs for m in moves], [a for _, a in rows], pad_id,
                             min(bucket_size(len(rows), multiple_of=shards), round_up(capacity, shards)),
                             width)
