"""Kuhn poker in plain words, for a real instruct model (`game_selfplay.rendering: chat`; SPIRAL's
setting; configs/smollm2_kuhn.yaml).

A player's OpenSpiel information state ("1pb": its card, then the moves so far, p for pass and b for
bet) becomes a user message, sent through the model's own chat template:

    Kuhn poker. You are player 1. Your card is the Queen. So far: you passed, your opponent bet.
    Do you pass or bet? Answer with one word.

The message is short on purpose: SmolLM2-135M-Instruct puts 9 % of its first-token mass on a move
after it, against 4 % when the rules of the game come first (RULES; measured at all 12 information
states), and a policy that never names a move has nothing to learn from.

The move is the reply's first word, case aside, with any punctuation before or after it ("Bet.",
"**pass**"); anything else ("I bet", "fold", an empty reply) is an invalid move, which ends the game
under SPIRAL's rules as for the tiny policies. So the first response token decides the move, and the
exact evaluation reads each move's probability from it: the summed probability of the move's
spellings that are one token ("bet", "Bet", " bet", " Bet"), renormalised over the legal moves.
"""

import re

CARDS = ("Jack", "Queen", "King")
# the rules in words: left out of the prompt (see above), kept for a larger model's prompt
RULES = ("You are playing Kuhn poker. The deck has three cards: Jack, Queen and King (the highest). "
         "Each player antes 1 chip and gets one card. On a turn you pass or bet 1 chip. After a bet, "
         "the other player bets to call or passes to fold. When nobody folds, the higher card wins "
         "the pot.")
PAST = {"p": "passed", "b": "bet"}
_FIRST_WORD = re.compile(r"\W*([A-Za-z]+)")


def history_text(history, seat):
    """'your opponent passed, you bet' for the moves `history` ("pb") seen from `seat` (player 0
    moves first)."""
    if not history:
        return "nothing yet, you move first"
    return ", ".join(f"{'you' if i % 2 == seat else 'your opponent'} {PAST[m]}"
                     for i, m in enumerate(history))


def information_state_text(information_state, seat):
    """The state sentences of Kuhn poker's information-state string `information_state` ("1pb")."""
    if not information_state or information_state[0] not in "012" or \
            any(m not in PAST for m in information_state[1:]):
        raise ValueError(f"{information_state!r} is not a Kuhn poker information state; expected a "
                         "card 0-2 followed by p/b moves, e.g. '1pb'")
    card, history = CARDS[int(information_state[0])], information_state[1:]
    return (f"You are player {seat + 1}. Your card is the {card}. So far: "
            f"{history_text(history, seat)}.")


def first_word(reply):
    """The reply's first word, lower-cased ('' when it has none)."""
    match = _FIRST_WORD.match(reply)
    return match.group(1).lower() if match else ""


def spellings(word):
    return dict.fromkeys((word, word.capitalize(), " " + word, " " + word.capitalize()))


class KuhnChatRendering:
    """games.TextGame's rendering of Kuhn poker as plain words (see the module's docstring)."""

    name, games = "chat", ("kuhn_poker",)

    def renders(self, name):
        return name in self.games

    def prompt(self, game, state, task="move"):
        if task != "move":
            raise ValueError(f"the chat rendering asks only for moves, not {task!r} (the repeat task "
                             "belongs to the tiny warm start of builtin:game)")
        moves = " or ".join(game.words[a] for a in state.legal_actions())
        seen = information_state_text(state.information_state_string(), state.current_player())
        return f"Kuhn poker. {seen}\nDo you {moves}? Answer with one word."

    def parse(self, game, state, text):
        action = game.action_of.get(first_word(text))
        return action if action is not None and action in state.legal_actions() else None

    def action_token_ids(self, tokenizer, game):
        """[A] the one-token spellings of each move (ValueError if a move has none)."""
        out = []
        for word in game.words:
            ids = [pieces[0] for s in spellings(word)
                   if len(pieces := tokenizer(s, add_special_tokens=False)["input_ids"]) == 1]
            if not ids:
                raise ValueError(f"game {game.name}: no spelling of the move {word!r} "
                                 f"({list(spellings(word))}) is one token of the policy's tokenizer; "
                                 "the exact evaluation reads each move from the first response token")
            out.append(list(dict.fromkeys(ids)))
        return out
