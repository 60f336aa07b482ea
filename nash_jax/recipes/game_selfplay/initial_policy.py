"""π_0 for `model.path: builtin:game`: the warm start, a tiny Llama fit (stage `init`) to near-uniform
legal moves of the configured games."""

import zlib

import numpy as np

from nash_jax.engine import preparation
from nash_jax.runs.keys import stage_seed
from nash_jax.tasks.games import games as games_lib


def warm_start(config, run, tokenizer, text_games, mesh):
    """Fit a tiny Llama to random legal moves of the configured games (stage `init`), drawn from
    `demonstration_policy`, and, for a share `warm_start_repeat` of the states, to repeating the
    information state when asked to: a tiny model fitted to near-uniform moves alone learns to ignore
    the state, and self-play then moves every state together."""
    if run.done("init"):
        return
    w, g = config.warm_start, config.game_selfplay
    model = preparation.tiny_llama(config, tokenizer)
    rng = np.random.default_rng(stage_seed(config.seed, 0, "warm_start"))
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
