"""Two-player zero-sum OpenSpiel games as text, and many of them played in parallel (host side).

`TextGame` is the one small adapter: a player's observation is its OpenSpiel information-state string,
rendered with the legal actions into a chat prompt; a response is parsed back to an action. Every
action is one word of the games' own word-level tokenizer (shipped beside this file, built by
`build_tokenizer`), so a policy's probability of each legal action at an information state is its
probability of that word as the first response token (tasks/games/game_eval.py reads it from the logits).

Rules (SPIRAL's): a response that is not exactly one legal action word ends the game, −1.5 to the
offender and +0.5 to the other seat; a game still running after `max_turns` player turns is a draw;
otherwise the winner (more chips, or the engine's winner) gets +1 and the loser −1 (`reward="outcome"`),
or each seat gets its OpenSpiel return (`reward="returns"`: the chips, the game whose exploitability
OpenSpiel computes).

`play` runs a list of games to the end: each round, every game waiting for a move asks the player in
its seat, and each player answers all of its requests with one batched call (one `generate` for a
model), so the cost of a round is one forward pass per player, not per game.
"""

import contextlib
import difflib
import importlib
import io
from dataclasses import dataclass, field

import numpy as np
import pyspiel

from nash_jax.models.tokenizer import build_word_tokenizer
from nash_jax.tasks import registry

TOKENIZER_DIR = registry.MODELS["builtin:game"].tokenizer_dir

SHIPPED_GAMES = ("kuhn_poker", "leduc_poker", "tic_tac_toe")
# Actions as single words; games not listed use OpenSpiel's action string, lower-cased.
ACTION_WORDS = {"kuhn_poker": ("pass", "bet"), "leduc_poker": ("fold", "call", "raise"),
                "tic_tac_toe": ("topleft", "top", "topright", "left", "center", "right",
                                "bottomleft", "bottom", "bottomright")}
PROMPT_WORDS = ("game", "you", "are", "player", "state", "legal", "moves", "answer", "with", "one",
                "move", "repeat", "the")


def load_openspiel_game(name):
    """pyspiel.load_game(name), or one short ValueError: an unknown name is found before OpenSpiel
    prints (to stderr, and again in its error) the list of all its games."""
    base = name.split("(")[0].strip()
    known = pyspiel.registered_names()
    if base not in known:
        close = difflib.get_close_matches(base, known, n=3)
        hint = f"; did you mean {close}?" if close else ""
        raise ValueError(f"game {name!r}: not an OpenSpiel game{hint} (shipped games: "
                         f"{list(SHIPPED_GAMES)})")
    try:
        return pyspiel.load_game(name)
    except pyspiel.SpielError as err:
        raise ValueError(f"game {name!r}: OpenSpiel cannot load it ({str(err).splitlines()[0]}); "
                         f"shipped games: {list(SHIPPED_GAMES)}") from None


class WordRendering:
    """The tiny policies' rendering: terse words of the games' own tokenizer (PROMPT_WORDS) and a reply
    that is exactly one action word. A rendering for a real instruct model (tasks/games/kuhn_chat.py) has
    the same four methods."""

    name, games = "words", SHIPPED_GAMES

    def renders(self, name):
        return True  # any OpenSpiel game: the state is OpenSpiel's own string

    def prompt(self, game, state, task="move"):
        """The user message for the player to move: the game, its seat, the legal moves and, last
        (nearest the answer, where a small model attends most easily), its information state.

        task="repeat" asks instead for the information state itself (an auxiliary task of the warm
        start that makes a small model's answer position encode the state)."""
        seat = state.current_player()
        legal = " ".join(game.words[a] for a in state.legal_actions())
        ask = "answer with one move" if task == "move" else "repeat the state"
        return (f"game {game.name} you are player {seat} {ask} legal moves {legal} "
                f"state {state.information_state_string()}")

    def parse(self, game, state, text):
        """The legal action a response names (exactly one action word), or None."""
        action = game.action_of.get(text.strip().lower())
        return action if action is not None and action in state.legal_actions() else None

    def action_token_ids(self, tokenizer, game):
        return [[token] for token in action_token_ids(tokenizer, game)]


class TextGame:
    """One OpenSpiel game behind text: prompts, action words, parsing and SPIRAL's outcome rules."""

    def __init__(self, name, *, max_turns=None, reward="outcome", invalid_penalty=-1.5,
                 invalid_bonus=0.5, rendering=None):
        self.game = load_openspiel_game(name)
        self.rendering = rendering or WordRendering()
        if not self.rendering.renders(name):
            raise ValueError(f"game {name!r}: the {self.rendering.name!r} rendering does not render it; "
                             f"it renders {list(self.rendering.games)}")
        kind = self.game.get_type()
        if (self.game.num_players() != 2 or kind.utility != pyspiel.GameType.Utility.ZERO_SUM
                or kind.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL):
            raise ValueError(f"game {name!r}: expected a two-player zero-sum sequential game")
        if reward not in ("outcome", "returns"):
            raise ValueError(f"reward={reward!r}; expected 'outcome' or 'returns'")
        self.name = name
        self.max_turns = max_turns or self.game.max_game_length()
        self.reward = reward
        self.invalid_penalty, self.invalid_bonus = invalid_penalty, invalid_bonus
        self.words = ACTION_WORDS.get(name) or _default_words(self.game)
        if len(self.words) != self.game.num_distinct_actions() or len(set(self.words)) != len(self.words):
            raise ValueError(f"game {name!r}: action words {self.words} are not one distinct word per "
                             f"action ({self.game.num_distinct_actions()} actions)")
        self.action_of = {w: a for a, w in enumerate(self.words)}

    def __repr__(self):
        return f"TextGame({self.name!r})"

    def prompt(self, state, task="move"):
        """The user message for the player to move (the rendering's; task="repeat" asks for the
        information state itself, the tiny warm start's auxiliary task)."""
        return self.rendering.prompt(self, state, task)

    def parse(self, state, text):
        """The legal action a response names, or None (an invalid move)."""
        return self.rendering.parse(self, state, text)

    def action_token_ids(self, tokenizer):
        """[A] lists of token ids: the first response tokens that name each action (exact evaluation)."""
        return self.rendering.action_token_ids(tokenizer, self)

    def new_state(self, rng):
        """A new game with its opening chance outcomes drawn from `rng` (numpy Generator)."""
        return self.resolve_chance(self.game.new_initial_state(), rng)

    @staticmethod
    def resolve_chance(state, rng):
        while state.is_chance_node():
            actions, probs = zip(*state.chance_outcomes())
            state.apply_action(actions[rng.choice(len(actions), p=np.asarray(probs) / sum(probs))])
        return state

    def outcome_rewards(self, record):
        """[2] rewards of a finished GameRecord under SPIRAL's rules."""
        if record.invalid_player is not None:
            r = np.full(2, self.invalid_bonus)
            r[record.invalid_player] = self.invalid_penalty
            return r
        if record.truncated:
            return np.zeros(2)
        if self.reward == "returns":
            return np.asarray(record.returns, np.float64)
        return np.array([0.0, 0.0]) if record.winner is None else np.where(
            np.arange(2) == record.winner, 1.0, -1.0)


def _default_words(game):
    """OpenSpiel's action strings at the first decision state, lower-cased (games not in ACTION_WORDS)."""
    state = game.new_initial_state()
    while state.is_chance_node():
        state.apply_action(state.chance_outcomes()[0][0])
    return tuple(state.action_to_string(state.current_player(), a).lower()
                 for a in range(game.num_distinct_actions()))


@dataclass
class Move:
    """A player's answer to one request: the response text, and for a model its tokens."""

    text: str
    prompt_ids: list | None = None
    tokens: list | None = None  # response token ids, EOS included
    logprobs: list | None = None  # per response token, under the distribution actually sampled


@dataclass
class Turn:
    seat: int
    move: Move
    action: int | None  # None: the move was not a legal action (the game ended on it)
    legal: tuple = ()  # the legal actions of the state it answered


@dataclass
class GameRecord:
    """One game played to its end."""

    game: TextGame
    index: int  # position in the list given to `play`
    players: tuple  # the player in each seat
    turns: list = field(default_factory=list)
    winner: int | None = None  # None: a draw (or truncated, or ended by an invalid move)
    invalid_player: int | None = None
    truncated: bool = False
    returns: tuple = (0.0, 0.0)  # OpenSpiel's returns (0, 0 unless the game ended normally)
    rewards: np.ndarray | None = None  # [2] under the game's rules

    def seat_turns(self, seat):
        return [t for t in self.turns if t.seat == seat]

    def result(self, seat):
        """'W', 'D' or 'L' for `seat`, an invalid move losing for its maker."""
        if self.invalid_player is not None:
            return "L" if self.invalid_player == seat else "W"
        if self.winner is None:
            return "D"
        return "W" if self.winner == seat else "L"


class RandomPlayer:
    """Uniformly random legal moves (a frozen opponent no training can move)."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def moves(self, requests, round_index):
        return [Move(game.words[self.rng.choice(state.legal_actions())]) for game, state in requests]


class ModelPlayer:
    """A language-model policy: all of one round's requests in one batched `generate` call."""

    def __init__(self, model, tokenizer, *, key, mesh, max_new_tokens, temperature=1.0, top_p=1.0,
                 top_k=0, max_prompt_tokens=None):
        self.model, self.tokenizer, self.key, self.mesh = model, tokenizer, key, mesh
        self.max_prompt_tokens = max_prompt_tokens  # data.max_prompt_tokens: what the plan sized
        self.sampling = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                             top_k=top_k)

    def moves(self, requests, round_index):
        import jax

        from nash_jax.parallel.padding import round_up
        from nash_jax.rollout.sampling import eos_ids_of, generate, pad_id_of
        from nash_jax.tasks.games.prompt_lengths import check_prompt_lengths

        prompt_ids = [encode_prompt(self.tokenizer, game.prompt(state)) for game, state in requests]
        check_prompt_lengths(requests, prompt_ids, self.max_prompt_tokens)
        # every round's prompts padded to the limit (rounded up to 8), when there is one: one sampler
        # program for all of a run's rounds, and no power-of-two bucket (69 tokens → 128) to prefill
        buckets = None if self.max_prompt_tokens is None else [round_up(self.max_prompt_tokens, 8)]
        samples = generate(self.model, prompt_ids, num_samples=1, prompt_buckets=buckets,
                           key=jax.random.fold_in(self.key, round_index), mesh=self.mesh,
                           eos_token_ids=eos_ids_of(self.tokenizer), pad_id=pad_id_of(self.tokenizer),
                           **self.sampling)
        out = []
        for b, ids in enumerate(prompt_ids):
            n = int(samples.lengths[b, 0])
            tokens = samples.tokens[b, 0, :n].tolist()
            out.append(Move(self.tokenizer.decode(tokens, skip_special_tokens=True), ids, tokens,
                            samples.logprobs[b, 0, :n].tolist()))
        return out


def encode_prompt(tokenizer, content):
    from nash_jax.models.tokenizer import chat_prompt

    return tokenizer(chat_prompt(tokenizer, content), add_special_tokens=False)["input_ids"]


def play(tables, rng, on_round=None):
    """Play every game of `tables` = [(TextGame, (player at seat 0, player at seat 1))] to its end →
    [GameRecord], in the same order. Chance outcomes come from `rng` (numpy Generator), in game order.

    Each round, the games waiting for a move are grouped by the player in the seat to move; each player
    answers its requests in one `moves(requests, round_index)` call."""
    records = [GameRecord(game, i, tuple(players)) for i, (game, players) in enumerate(tables)]
    states = [game.new_state(rng) for game, _ in tables]
    live = [not s.is_terminal() for s in states]
    round_index = 0
    while any(live):
        waiting = {}
        for i, state in enumerate(states):
            if live[i]:
                player = records[i].players[state.current_player()]
                waiting.setdefault(id(player), (player, []))[1].append(i)
        for player, indices in waiting.values():
            moves = player.moves([(records[i].game, states[i]) for i in indices], round_index)
            for i, move in zip(indices, moves):
                live[i] = _apply(records[i], states[i], move, rng)
        round_index += 1
        if on_round is not None:
            on_round(round_index)
    for record in records:
        record.rewards = record.game.outcome_rewards(record)
    return records


def _apply(record, state, move, rng):
    """Apply one move to a game; → whether the game goes on."""
    seat = state.current_player()
    action = record.game.parse(state, move.text)
    record.turns.append(Turn(seat, move, action, tuple(state.legal_actions())))
    if action is None:
        record.invalid_player = seat
        return False
    state.apply_action(action)
    record.game.resolve_chance(state, rng)
    if state.is_terminal():
        record.returns = tuple(float(r) for r in state.returns())
        if record.returns[0] != record.returns[1]:
            record.winner = int(np.argmax(record.returns))
        return False
    if len(record.turns) >= record.game.max_turns:
        record.truncated = True
        return False
    return True


# ---------------------------------------------------------------------------------------------------
# the games' tokenizer


def open_spiel_module(name):
    """open_spiel.python.<name>, imported without the notice open_spiel prints on stdout about an
    optional game it lacks (it would mix into nash-jax's output)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return importlib.import_module(f"open_spiel.python.{name}")


def information_states(game):
    """Every decision state of `game` (pyspiel.Game), one per information-state string, in the order
    of OpenSpiel's TabularPolicy (the order the exact evaluation uses)."""
    tabular = open_spiel_module("policy").TabularPolicy(game)
    return tabular, [tabular.states[i] for i in range(len(tabular.states))]


def vocabulary():
    """The words of every prompt and move of the shipped games: both poker games' information states
    enumerated, tic-tac-toe's histories (digits and commas), the prompt words and the action words."""
    from tokenizers import pre_tokenizers

    split = _pre_tokenizer(pre_tokenizers)
    words = set(PROMPT_WORDS) | set("0123456789[]:,()")
    for name in SHIPPED_GAMES:
        game = TextGame(name)
        words.update(game.words)
        words.update(w for w, _ in split.pre_tokenize_str(name))
        if name != "tic_tac_toe":  # tic-tac-toe's 5,478 states add only digits and commas
            for state in information_states(game.game)[1]:
                words.update(w for w, _ in split.pre_tokenize_str(game.prompt(state)))
    return sorted(words)


def _pre_tokenizer(pre_tokenizers):
    # Punctuation is split off, nothing else: Kuhn's states ("1pb": card, then the bets) stay one word
    # each, which a tiny model reads far more easily than a card two tokens back.
    return pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                    pre_tokenizers.Punctuation("isolated")])


def build_tokenizer(path):
    """Build the games' word-level tokenizer (punctuation split off) and save it to `path`."""
    from tokenizers import pre_tokenizers

    return build_word_tokenizer(path, vocabulary(), _pre_tokenizer(pre_tokenizers))


def action_token_ids(tokenizer, game):
    """[num_distinct_actions] the token id of each action word; ValueError if one is not one token."""
    ids = []
    for word in game.words:
        pieces = tokenizer(word, add_special_tokens=False)["input_ids"]
        if len(pieces) != 1 or pieces[0] == tokenizer.unk_token_id:
            raise ValueError(f"game {game.name}: action word {word!r} is {pieces} in the policy's "
                             "tokenizer; expected one known token (exact evaluation reads each "
                             "action's probability from the first response token)")
        ids.append(pieces[0])
    return ids
