"""Kuhn poker as plain words for a real instruct model (tasks/games/kuhn_chat.py): every information state
rendered, the move read from a reply's first word, and the exact evaluation reading each move's
one-token spellings from SmolLM2's real tokenizer and chat template."""

import numpy as np
import pytest

from nash_jax.models.tokenizer import load_tokenizer
from nash_jax.tasks.games import game_eval, games, kuhn_chat


@pytest.fixture(scope="module")
def kuhn():
    return games.TextGame("kuhn_poker", rendering=kuhn_chat.KuhnChatRendering())


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2_dir):
    return load_tokenizer(smollm2_dir)


# information state -> what the player to move is told (cards 0 = Jack, 1 = Queen, 2 = King)
SEEN = {"0": "You are player 1. Your card is the Jack. So far: nothing yet, you move first.",
        "2p": "You are player 2. Your card is the King. So far: your opponent passed.",
        "1b": "You are player 2. Your card is the Queen. So far: your opponent bet.",
        "1pb": "You are player 1. Your card is the Queen. So far: you passed, your opponent bet."}


def test_every_information_state_is_rendered_with_its_card_seat_and_history(kuhn):
    _, states = games.information_states(kuhn.game)
    assert len(states) == 12
    for state in states:
        key, seat = state.information_state_string(), state.current_player()
        text = kuhn.prompt(state)
        assert text.startswith("Kuhn poker. ") and text.endswith("Do you pass or bet? Answer with one word.")
        assert f"Your card is the {kuhn_chat.CARDS[int(key[0])]}." in text
        assert f"You are player {seat + 1}." in text
        so_far = text.split("So far: ")[1].split(".")[0]
        assert (so_far.count("passed"), so_far.count(" bet")) == (key.count("p"), key.count("b")), text
        if key in SEEN:
            assert SEEN[key] in text, text
    assert len({kuhn.prompt(s) for s in states}) == 12  # no two states look alike


def test_a_string_that_is_not_a_kuhn_state_is_refused_with_what_was_expected():
    for bad in ("", "3p", "1x", "pb"):
        with pytest.raises(ValueError, match="not a Kuhn poker information state"):
            kuhn_chat.information_state_text(bad, 0)


@pytest.mark.parametrize("reply, move", [("bet", "bet"), ("Bet.", "bet"), ("  PASS\n", "pass"),
                                         ("**pass**", "pass"), ("Pass, because I hold the Jack", "pass"),
                                         ("bet pass", "bet")])
def test_the_move_is_the_replys_first_word(kuhn, reply, move):
    state = kuhn.new_state(np.random.default_rng(0))
    assert kuhn.parse(state, reply) == kuhn.words.index(move)


@pytest.mark.parametrize("reply", ["I bet", "fold", "", "...", "betting", "raise"])
def test_any_other_reply_is_an_invalid_move(kuhn, reply):
    state = kuhn.new_state(np.random.default_rng(0))
    assert kuhn.parse(state, reply) is None


def test_the_chat_rendering_refuses_other_games_and_the_repeat_task(kuhn):
    with pytest.raises(ValueError, match="does not render it"):
        games.TextGame("leduc_poker", rendering=kuhn_chat.KuhnChatRendering())
    with pytest.raises(ValueError, match="asks only for moves"):
        kuhn.prompt(kuhn.new_state(np.random.default_rng(0)), "repeat")


def test_on_smollm2_the_prompt_is_chat_templated_and_each_move_has_its_own_spellings(kuhn,
                                                                                    smollm2_tokenizer):
    tok = smollm2_tokenizer
    state = kuhn.new_state(np.random.default_rng(0))
    text = tok.decode(games.encode_prompt(tok, kuhn.prompt(state)))
    assert text.startswith("<|im_start|>system\n") and text.endswith(
        f"{kuhn.prompt(state)}<|im_end|>\n<|im_start|>assistant\n")
    spellings = kuhn.action_token_ids(tok)
    assert [sorted(tok.decode([t]).strip().lower() for t in ids) for ids in spellings] == \
        [["pass"] * 4, ["bet"] * 4]
    assert not set(spellings[0]) & set(spellings[1])


def test_the_exact_evaluation_sums_a_moves_spellings(kuhn, smollm2_tokenizer):
    """First-token mass put on "Bet" and " pass" (not the lower-case words) is read as those moves,
    and the mass on other tokens is the illegal mass."""
    tok = smollm2_tokenizer
    evaluator = game_eval.ExactEvaluator.build(kuhn, tok)
    (_, pass_cap, pass_space, _), (_, bet_cap, _, _) = evaluator.action_ids
    logp = np.full((12, len(tok)), np.log(0.4 / (len(tok) - 2)))
    logp[:, bet_cap], logp[:, pass_space] = np.log(0.45), np.log(0.15)
    probs, illegal = evaluator.probabilities(logp)
    np.testing.assert_allclose(probs[:, 1], 0.75, atol=1e-3)
    np.testing.assert_allclose(illegal, 0.4, atol=1e-3)
    assert tok.decode([pass_cap]) == "Pass"
