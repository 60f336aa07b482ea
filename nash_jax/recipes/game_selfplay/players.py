"""The policy at the table: a sampling player of the run's `sampling` settings, its exact metrics
(exploitability, NashConv, illegal mass) in the games that have an exact evaluator, and the entropy
bonus of its moves."""

import numpy as np

from nash_jax.core import advantages as adv
from nash_jax.tasks.games import game_eval
from nash_jax.tasks.games import games as games_lib


def model_player(config, model, tokenizer, key, mesh):
    s = config.sampling
    return games_lib.ModelPlayer(model, tokenizer, key=key, mesh=mesh, max_new_tokens=s.max_new_tokens,
                                 temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                                 max_prompt_tokens=config.data.max_prompt_tokens)


def exact_metrics(evaluators, model, mesh, pad_id):
    """{exploitability (first exact game), exploitability_<game>, nash_conv_<game>, illegal_mass_<game>}."""
    out = {}
    for name, evaluator in evaluators.items():
        metrics, _ = evaluator.model_metrics(model, mesh, pad_id)
        out.setdefault("exploitability", metrics["exploitability"])
        out.update({f"{k}_{name}": v for k, v in metrics.items()})
    return out


def move_entropy_bonuses(moves, model, tokenizer, mesh, pad_id, coef, width=None):
    """(bonus [n], entropy [n]) of each (TextGame, Turn) of `moves` (adv.move_entropy_bonus): the policy
    over the legal moves read, as the exact evaluation reads it, from the first response token after
    the turn's own prompt (one forward pass per game, of prompts padded to `width`:
    game_eval.first_token_logprobs). An invalid move gets 0 and 0: it named no legal move, and its
    penalty is its whole signal."""
    bonus, entropy = np.zeros(len(moves), np.float32), np.zeros(len(moves), np.float32)
    by_game = {}
    for i, (game, turn) in enumerate(moves):
        if turn.action is not None:
            by_game.setdefault(game, []).append(i)
    for game, rows in by_game.items():
        turns = [moves[i][1] for i in rows]
        legal = np.zeros((len(rows), len(game.words)), bool)
        for r, turn in enumerate(turns):
            legal[r, list(turn.legal)] = True
        logp = game_eval.first_token_logprobs(model, [t.move.prompt_ids for t in turns], mesh, pad_id,
                                              width=width)
        probs, _ = game_eval.move_probabilities(logp, game.action_token_ids(tokenizer), legal)
        b, h = adv.move_entropy_bonus(probs, np.array([t.action for t in turns]), coef)
        bonus[rows], entropy[rows] = np.asarray(b), np.asarray(h)
    return bonus, entropy
