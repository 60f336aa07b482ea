"""Anchors of game self-play that the moving game cannot change.

Exact exploitability (small games: Kuhn and Leduc poker): at every information state the policy's
probability of each legal action is read from the log-probs of the first response token (the summed
probability of the tokens that name it: one action word for the tiny policies, its spellings such as
"bet", "Bet", " bet" for a real model's chat rendering), renormalised over the legal actions (the mass
on anything else, an invalid move, is reported apart as `illegal_mass`), and becomes an OpenSpiel TabularPolicy whose NashConv and
exploitability OpenSpiel computes by best response.

Frozen-opponent tables: wins / draws / losses per seat of each iterate against a uniformly random
player, the initial policy and the other snapshots, from games played with `games.play`.
"""

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nash_jax import parallel
from nash_jax.parallel.padding import bucket_size, left_pad
from nash_jax.tasks.games import games as games_lib

EXACT_GAMES = ("kuhn_poker", "leduc_poker")  # small enough for exact best responses


@dataclass
class ExactEvaluator:
    """The information states of one game, their prompts, and the action tokens to read."""

    game: games_lib.TextGame
    tabular: object  # open_spiel TabularPolicy (its state order)
    keys: list  # information-state strings
    legal: np.ndarray  # [S, A] bool
    prompt_ids: list  # [S] token-id lists
    action_ids: list  # [A] lists: the first response tokens that name each action (the rendering's)

    @classmethod
    def build(cls, game, tokenizer):
        tabular, states = games_lib.information_states(game.game)
        legal = np.asarray(tabular.legal_actions_mask, bool)
        return cls(game, tabular, list(tabular.state_lookup), legal,
                   [games_lib.encode_prompt(tokenizer, game.prompt(s)) for s in states],
                   game.action_token_ids(tokenizer))

    def probabilities(self, first_logprobs):
        """([S, A] action probabilities over the legal actions, [S] illegal mass) from the log-probs
        [S, V] of the first response token at every information state."""
        return move_probabilities(first_logprobs, self.action_ids, self.legal)

    def evaluate(self, probs):
        """{"exploitability", "nash_conv"} of the tabular policy with action probabilities [S, A]."""
        exploitability = games_lib.open_spiel_module("algorithms.exploitability")
        policy = self.tabular.__copy__()
        policy.action_probability_array = np.asarray(probs, np.float64)
        return {"nash_conv": float(exploitability.nash_conv(self.game.game, policy)),
                "exploitability": float(exploitability.exploitability(self.game.game, policy))}

    def model_metrics(self, model, mesh, pad_id):
        """Exact metrics of a language-model policy, and its probabilities {state: {word: p}}."""
        probs, illegal = self.probabilities(first_token_logprobs(model, self.prompt_ids, mesh, pad_id))
        metrics = {**self.evaluate(probs), "illegal_mass": float(illegal.mean())}
        return metrics, self.as_dict(probs)

    def as_dict(self, probs):
        return {key: {self.game.words[a]: float(probs[s, a]) for a in np.flatnonzero(self.legal[s])}
                for s, key in enumerate(self.keys)}


def move_probabilities(first_logprobs, action_ids, legal):
    """([S, A] the policy over the legal actions, [S] illegal mass) from the log-probs [S, V] of the
    first response token, the tokens `action_ids` [A] that name each action, and legal [S, A] bool:
    each action's summed token probability, renormalised over the legal ones (uniform where they have
    no mass at all)."""
    logp = np.asarray(first_logprobs, np.float64)
    legal = np.asarray(legal, bool)
    p = np.stack([np.exp(logp[:, ids]).sum(axis=1) for ids in action_ids], axis=1) * legal
    legal_mass = p.sum(axis=1, keepdims=True)
    uniform = legal / legal.sum(axis=1, keepdims=True)
    probs = np.where(legal_mass > 0, p / np.where(legal_mass > 0, legal_mass, 1.0), uniform)
    return probs, np.clip(1.0 - legal_mass[:, 0], 0.0, 1.0)


def exact_evaluator(game, tokenizer):
    """An ExactEvaluator for `game` if it is small enough, else None."""
    return ExactEvaluator.build(game, tokenizer) if game.name in EXACT_GAMES else None


def first_token_logprobs(model, prompt_ids, mesh, pad_id, per_call=1024, width=None):
    """[S, V] log-probs of the first response token after each prompt (one forward pass per chunk).
    width: the prompts' padded length when they all fit it (a run's prompt limit: one program for
    every call), else the power of two ≥ 8 that fits the longest."""
    out = []
    for start in range(0, len(prompt_ids), per_call):
        chunk = prompt_ids[start:start + per_call]
        longest = max(len(p) for p in chunk)
        padded = width if width is not None and longest <= width else bucket_size(longest, minimum=8)
        rows = parallel.pad_to_shards(chunk, mesh, bucket=True)
        tokens, segment_ids = left_pad(rows, padded, pad_id)
        sharding = parallel.batch_sharding(mesh, 2)
        logp = _next_token_logprobs(model, parallel.place_global_array(tokens, sharding),
                                    parallel.place_global_array(segment_ids, sharding))
        out.append(parallel.gather_to_host(logp)[:len(chunk)])
    return np.concatenate(out)


@nnx.jit
def _next_token_logprobs(model, tokens, segment_ids):
    hidden, _ = model.hidden_states(tokens, segment_ids=segment_ids)
    return jax.nn.log_softmax(model.logits(hidden[:, -1]).astype(jnp.float32))  # the head at one position


# ---------------------------------------------------------------------------------------------------
# frozen-opponent tables


def tournament(games, iterates, opponents, *, games_per_seat, rng):
    """Counts of every iterate against every opponent, per game and seat.

    iterates: [(label, player)]; opponents: [(label, player)] (iterates may be among them: a player
    against itself gives the first-mover asymmetry). → (counts {game: {iterate: {opponent: [[W, D, L]
    at seat 0, [W, D, L] at seat 1]}}}, invalid {game: {iterate: [invalid moves, moves]}}). All games
    are played in one `games.play` call, so each player answers each round in one batch."""
    tables, owners = [], []
    for game in games:
        for a, (label, player) in enumerate(iterates):
            for b, (other, opponent) in enumerate(opponents):
                for seat in (0, 1):
                    seats = (player, opponent) if seat == 0 else (opponent, player)
                    tables += [(game, seats)] * games_per_seat
                    owners += [(game.name, label, other, seat)] * games_per_seat
    records = games_lib.play(tables, rng)
    counts, invalid = {}, {}
    for record, (game, label, other, seat) in zip(records, owners):
        cell = counts.setdefault(game, {}).setdefault(label, {}).setdefault(other, [[0] * 3, [0] * 3])
        cell[seat]["WDL".index(record.result(seat))] += 1
        moves = record.seat_turns(seat)
        tally = invalid.setdefault(game, {}).setdefault(label, [0, 0])
        tally[0] += sum(t.action is None for t in moves)
        tally[1] += len(moves)
    return counts, invalid


def win_rate(wdl):
    """(W + D/2) / (W + D + L) of one [W, D, L] (nan without games)."""
    w, d, l = wdl
    return (w + 0.5 * d) / (w + d + l) if w + d + l else float("nan")


def seat_averaged(cell):
    """The mean over the two seats of the win rates of one [[W, D, L], [W, D, L]] cell."""
    return 0.5 * (win_rate(cell[0]) + win_rate(cell[1]))
