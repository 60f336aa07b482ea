"""The OpenSpiel text adapter on every shipped game (rendering, parsing, illegal moves, truncation,
batched rounds) and the exact exploitability path: a scripted policy that plays Kuhn poker's Nash
equilibrium through first-token log-probs gets exploitability ≈ 0; the uniform one gets OpenSpiel's."""

import numpy as np
import pytest
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms import exploitability as os_exploitability

from nash_jax.models.tokenizer import load_tokenizer
from nash_jax.tasks.games import game_eval, games, prompt_lengths


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(games.TOKENIZER_DIR)


class Scripted:
    """Answers every request with a fixed text, or a legal word chosen by `choose(game, state)`;
    counts its calls and the requests of each."""

    def __init__(self, text=None, choose=None):
        self.text, self.choose, self.calls = text, choose, []

    def moves(self, requests, round_index):
        self.calls.append(len(requests))
        return [games.Move(self.text if self.choose is None else game.words[self.choose(game, state)])
                for game, state in requests]


def first_legal(game, state):
    return state.legal_actions()[0]


def test_the_shipped_tokenizer_is_the_one_build_tokenizer_makes(tmp_path, tokenizer):
    rebuilt = games.build_tokenizer(tmp_path)
    assert rebuilt.get_vocab() == tokenizer.get_vocab()


@pytest.mark.parametrize("name", games.SHIPPED_GAMES)
def test_prompts_render_the_information_state_and_legal_moves_in_known_words(name, tokenizer):
    game = games.TextGame(name)
    rng = np.random.default_rng(0)
    unknown = tokenizer.unk_token_id
    for _ in range(20):
        state = game.new_state(rng)
        while not state.is_terminal():
            text = game.prompt(state)
            assert text.endswith(f"state {state.information_state_string()}".rstrip()) or \
                state.information_state_string() == "", text
            assert "legal moves " + " ".join(game.words[a] for a in state.legal_actions()) in text
            ids = games.encode_prompt(tokenizer, text)
            assert unknown not in ids, tokenizer.convert_ids_to_tokens(ids)
            state.apply_action(int(rng.choice(state.legal_actions())))
            game.resolve_chance(state, rng)
    assert len(games.action_token_ids(tokenizer, game)) == game.game.num_distinct_actions()


@pytest.mark.parametrize("name", games.SHIPPED_GAMES)
def test_responses_parse_to_legal_actions_only(name):
    game = games.TextGame(name)
    state = game.new_state(np.random.default_rng(1))
    legal = state.legal_actions()
    word = game.words[legal[-1]]
    assert game.parse(state, word) == legal[-1]
    assert game.parse(state, f"  {word.upper()}\n") == legal[-1]  # case and surrounding space
    assert game.parse(state, f"{word} {word}") is None  # one word, not two
    assert game.parse(state, "hello") is None
    assert game.parse(state, "") is None
    illegal = [a for a in range(game.game.num_distinct_actions()) if a not in legal]
    if name == "tic_tac_toe":  # an occupied cell
        state.apply_action(4)
        illegal = [4]
    for a in illegal:
        assert game.parse(state, game.words[a]) is None, game.words[a]


@pytest.mark.parametrize("name", games.SHIPPED_GAMES)
def test_an_invalid_move_ends_the_game_minus_one_and_a_half_to_the_offender(name):
    game = games.TextGame(name)
    for offender in (0, 1):
        good, bad = Scripted(choose=first_legal), Scripted(text="nonsense")
        players = (bad, good) if offender == 0 else (good, bad)
        (record,) = games.play([(game, players)], np.random.default_rng(2))
        assert record.invalid_player == offender
        assert record.turns[-1].action is None and record.turns[-1].seat == offender
        assert len(record.seat_turns(offender)) == 1  # the game stopped at its first invalid move
        expected = np.full(2, 0.5)
        expected[offender] = -1.5
        np.testing.assert_array_equal(record.rewards, expected)
        assert record.result(offender) == "L" and record.result(1 - offender) == "W"


def test_too_many_turns_is_a_draw():
    game = games.TextGame("tic_tac_toe", max_turns=3)
    player = Scripted(choose=first_legal)
    (record,) = games.play([(game, (player, player))], np.random.default_rng(0))
    assert record.truncated and len(record.turns) == 3
    np.testing.assert_array_equal(record.rewards, [0.0, 0.0])
    assert record.result(0) == record.result(1) == "D"


@pytest.mark.parametrize("name", games.SHIPPED_GAMES)
def test_finished_games_score_win_loss_or_the_engine_returns(name):
    rng = np.random.default_rng(3)
    outcome, returns = games.TextGame(name), games.TextGame(name, reward="returns")
    player = games.RandomPlayer(4)
    for record in games.play([(outcome, (player, player))] * 30, rng):
        assert record.invalid_player is None and not record.truncated
        assert sum(record.returns) == pytest.approx(0.0)
        w = record.winner
        expected = [0.0, 0.0] if w is None else [1.0 if s == w else -1.0 for s in (0, 1)]
        np.testing.assert_array_equal(record.rewards, expected)
        np.testing.assert_array_equal(returns.outcome_rewards(record), record.returns)


def test_each_round_asks_each_player_once_for_all_its_waiting_games():
    game = games.TextGame("tic_tac_toe")
    a, b = Scripted(choose=first_legal), Scripted(choose=first_legal)
    records = games.play([(game, (a, b))] * 5 + [(game, (b, a))] * 3, np.random.default_rng(0))
    # first-legal play ends every game at turn 7 (seat 0 completes the first column... or a row)
    assert all(len(r.turns) == len(records[0].turns) for r in records)
    rounds = len(records[0].turns)
    assert len(a.calls) == len(b.calls) == rounds
    assert a.calls[0] == 5 and b.calls[0] == 3 and a.calls[1] == 3 and b.calls[1] == 5


# ---------------------------------------------------------------------------------------------------
# exact exploitability

# Kuhn poker's Nash equilibrium with α = 0 (cards 0 = J, 1 = Q, 2 = K; probabilities of "bet")
KUHN_NASH_BET = {"0": 0.0, "1": 0.0, "2": 0.0, "0pb": 0.0, "1pb": 1 / 3, "2pb": 1.0,
                 "0p": 1 / 3, "0b": 0.0, "1p": 0.0, "1b": 1 / 3, "2p": 1.0, "2b": 1.0}


def logprobs_putting(evaluator, vocab, probs, legal_share=0.9):
    """[S, V] first-token log-probs with `legal_share` of the mass on the action words in proportion
    to probs [S, A] and the rest spread over the other tokens (invalid moves)."""
    out = np.full((len(evaluator.keys), vocab), (1 - legal_share) / (vocab - len(evaluator.action_ids)))
    for s in range(len(evaluator.keys)):
        for a, (token,) in enumerate(evaluator.action_ids):  # the word rendering: one token per action
            out[s, token] = legal_share * probs[s, a]
    return np.log(np.maximum(out, 1e-300))


def test_a_prompt_longer_than_data_max_prompt_tokens_is_refused_naming_the_state(tokenizer):
    """The training step (and `nash-jax plan`) is sized for prompts up to data.max_prompt_tokens; the
    player refuses a longer one before generating (so no model is needed here)."""
    game = games.TextGame("kuhn_poker")
    state = game.new_state(np.random.default_rng(0))
    ids = games.encode_prompt(tokenizer, game.prompt(state))
    length = len(ids)
    prompt_lengths.check_prompt_lengths([(game, state)], [ids], length)  # up to the limit: accepted
    short = games.ModelPlayer(None, tokenizer, key=None, mesh=None, max_new_tokens=4,
                              max_prompt_tokens=length - 1)
    with pytest.raises(ValueError, match=f"kuhn_poker: the prompt at state .* is {length} tokens, over "
                                         f"data.max_prompt_tokens={length - 1}"):
        short.moves([(game, state)], 0)


@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker"])
def test_every_decision_states_prompt_is_checked_before_any_work(tokenizer, name):
    """The recipe checks each information state's prompt before its warm start: a limit one token
    short of the longest is refused naming that state; the longest itself is accepted."""
    game = games.TextGame(name)
    _, states = games.information_states(game.game)
    longest = max(len(games.encode_prompt(tokenizer, game.prompt(s))) for s in states)
    prompt_lengths.check_every_prompt(game, tokenizer, longest)
    with pytest.raises(ValueError, match=f"{name}: the prompt at state .* is {longest} tokens, over "
                                         f"data.max_prompt_tokens={longest - 1}"):
        prompt_lengths.check_every_prompt(game, tokenizer, longest - 1)


def test_the_kuhn_demo_bounds_every_prompt_it_can_meet(tokenizer):
    """configs/kuhn_demo.yaml's data.max_prompt_tokens (what its plan sizes) holds every information
    state's prompt."""
    import yaml

    from tests.recipes.conftest import CONFIGS

    bound = yaml.safe_load((CONFIGS / "kuhn_demo.yaml").read_text())["data"]["max_prompt_tokens"]
    game = games.TextGame("kuhn_poker")
    _, states = games.information_states(game.game)
    longest = max(len(games.encode_prompt(tokenizer, game.prompt(s))) for s in states)
    assert longest <= bound, (longest, bound)


def test_kuhn_nash_policy_read_from_logits_has_zero_exploitability(tokenizer):
    evaluator = game_eval.ExactEvaluator.build(games.TextGame("kuhn_poker"), tokenizer)
    assert sorted(evaluator.keys) == sorted(KUHN_NASH_BET)
    nash = np.array([[1 - KUHN_NASH_BET[k], KUHN_NASH_BET[k]] for k in evaluator.keys])
    probs, illegal = evaluator.probabilities(logprobs_putting(evaluator, len(tokenizer), nash))
    np.testing.assert_allclose(illegal, 0.1, atol=1e-12)
    np.testing.assert_allclose(probs, nash, atol=1e-12)
    measured = evaluator.evaluate(probs)
    assert abs(measured["exploitability"]) < 1e-9, measured
    assert abs(measured["nash_conv"]) < 1e-9, measured
    assert evaluator.as_dict(probs)["1b"] == pytest.approx({"pass": 2 / 3, "bet": 1 / 3})


@pytest.mark.parametrize("name", game_eval.EXACT_GAMES)
def test_uniform_logits_give_openspiels_exploitability_of_the_uniform_policy(name, tokenizer):
    game = games.TextGame(name)
    evaluator = game_eval.ExactEvaluator.build(game, tokenizer)
    vocab = len(tokenizer)
    probs, illegal = evaluator.probabilities(np.full((len(evaluator.keys), vocab), -np.log(vocab)))
    measured = evaluator.evaluate(probs)
    uniform = os_policy.UniformRandomPolicy(game.game)
    expected = os_exploitability.exploitability(game.game, uniform)
    assert measured["exploitability"] == pytest.approx(expected, abs=1e-12), (measured, expected)
    assert measured["nash_conv"] == pytest.approx(os_exploitability.nash_conv(game.game, uniform),
                                                  abs=1e-12)
    np.testing.assert_allclose(illegal, 1 - evaluator.legal.sum(1) / vocab)
    if name == "kuhn_poker":
        assert measured["exploitability"] == pytest.approx(11 / 24)  # 0.4583...


def test_the_model_path_reads_the_first_response_token_of_every_information_state(tokenizer):
    """A tiny random Llama: the probabilities from first_token_logprobs equal those of its own logits
    at the last prompt position, one prompt at a time."""
    import jax
    from flax import nnx

    from nash_jax import parallel
    from nash_jax.models.llama import Llama, LlamaConfig

    model = Llama(LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                              num_layers=1, num_heads=2, num_kv_heads=1, head_dim=8), rngs=nnx.Rngs(0))
    evaluator = game_eval.ExactEvaluator.build(games.TextGame("kuhn_poker"), tokenizer)
    mesh = parallel.make_mesh()
    batched = game_eval.first_token_logprobs(model, evaluator.prompt_ids, mesh, tokenizer.pad_token_id)
    for s in (0, 5, 11):
        ids = np.asarray([evaluator.prompt_ids[s]])
        logits, _ = model(ids, segment_ids=np.ones_like(ids))
        alone = np.asarray(jax.nn.log_softmax(logits[0, -1]))
        np.testing.assert_allclose(batched[s], alone, atol=2e-5)
    metrics, policy = evaluator.model_metrics(model, mesh, tokenizer.pad_token_id)
    assert set(policy) == set(evaluator.keys)
    assert all(sum(p.values()) == pytest.approx(1.0) for p in policy.values())
    assert 0.0 <= metrics["exploitability"] <= 2.0
