"""The synthetic task: its shipped tokenizer, its oracle and the exact class distribution."""

import filecmp

import numpy as np
import pytest

from nash_jax.core import game
from nash_jax.models.tokenizer import load_tokenizer
from nash_jax.tasks.synthetic import synthetic


def test_shipped_tokenizer_is_what_build_tokenizer_makes(tmp_path):
    synthetic.build_tokenizer(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert filecmp.cmp(tmp_path / name, synthetic.TOKENIZER_DIR / name, shallow=False), name


def test_tokenizer_round_trips_a_demonstration():
    tok = load_tokenizer(synthetic.TOKENIZER_DIR)
    text = synthetic.demonstration("write a kind reply about rivers", np.random.default_rng(0))
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids and tok.decode(ids) == text


def test_oracle_has_a_transitive_and_a_cyclic_part():
    pref = synthetic.preference_matrix()
    witty, formal, poetic = (synthetic.CLASSES.index(s) for s in ("witty", "formal", "poetic"))
    assert pref[witty, formal] > 0.5 and pref[formal, poetic] > 0.5 and pref[poetic, witty] > 0.5
    plain, off = synthetic.CLASSES.index("plain"), synthetic.CLASSES.index("off-task")
    assert all(pref[s, plain] > 0.5 for s in (witty, formal, poetic)) and np.all(pref[:off, off] > 0.5)
    nash = game.nash_equilibrium(pref).policy
    assert nash[plain] == pytest.approx(0, abs=1e-9) and min(nash[[witty, formal, poetic]]) > 0.2


def test_oracle_judges_by_the_first_word():
    judge = synthetic.SyntheticOracle()
    pref = judge.prob_matrix(["x"], [["witty reply", "formal reply", "hello", "witty ."]])[0]
    m = synthetic.preference_matrix()
    assert pref[0, 1] == pytest.approx(m[1, 2]) and pref[2, 0] == pytest.approx(m[4, 1])
    assert pref[0, 3] == 0.5


def test_class_probabilities_put_the_rest_of_the_mass_on_off_task():
    tok = load_tokenizer(synthetic.TOKENIZER_DIR)
    logp = np.full((1, len(tok)), -np.inf)
    logp[0, tok.convert_tokens_to_ids("witty")] = np.log(0.6)
    logp[0, tok.convert_tokens_to_ids("reply")] = np.log(0.4)
    probs = synthetic.class_probabilities(logp, tok)
    np.testing.assert_allclose(probs, [[0, 0.6, 0, 0, 0.4]], atol=1e-12)
    expected = game.exploitability(synthetic.preference_matrix(), probs[0])
    assert synthetic.mean_exploitability(probs) == pytest.approx(expected)
