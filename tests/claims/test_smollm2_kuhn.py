"""configs/smollm2_kuhn.yaml shortened to one step: Kuhn poker self-play on the real
SmolLM2-135M-Instruct, its information states as plain words through its chat template and its moves
read from its replies, through the CLI. The full run's figures are in README ("A real model on a
laptop"); here: the pipeline, and that the anchors come out (the exact exploitability of the text
policy before and after the step, its illegal mass, the invalid-move rate of play)."""

import pytest

from tests.recipes.conftest import run_on_real_model

pytestmark = pytest.mark.long

SHORTENED = ("game_selfplay.steps=1", "game_selfplay.snapshots=1", "game_selfplay.eval_every=1",
             "game_selfplay.games_per_step=4", "game_selfplay.eval_games=1")


@pytest.fixture(scope="module")
def finished_run(smollm2_dir, tmp_path_factory):
    return run_on_real_model("smollm2_kuhn", smollm2_dir, tmp_path_factory, SHORTENED)


def test_the_run_reports_the_exact_exploitability_of_the_text_policy(finished_run):
    _, stdout, report = finished_run
    e = report["exploitability"]
    assert e["step"] == [0, 1] and all(0.0 <= v <= 1.0 for v in e["value"]), e
    assert f"{e['value'][0]:.4f}" in stdout
    assert set(report["policy"]) == {"0", "1", "2", "0p", "1p", "2p", "0b", "1b", "2b",
                                     "0pb", "1pb", "2pb"}
    assert all(sum(p.values()) == pytest.approx(1.0) for p in report["policy"].values())
    pi_0 = report["per_iterate"][0]
    # SmolLM2 mostly starts its reply with something other than a move ("You", "I", ...): most of its
    # first-token mass is illegal, and the mass on a move is what the exact evaluation renormalises
    assert pi_0["iterate"] == "pi_0" and 0.5 < pi_0["illegal_mass_kuhn_poker"] < 1.0, pi_0
    assert pi_0["exploitability"] == pytest.approx(e["value"][0])
    assert all(0.0 <= r <= 1.0 for r in report["training"]["invalid_rate"])
    # the config's entropy bonus on the legal moves: the entropy of the moves played (≤ ln 2), None
    # for a step whose every move was invalid
    entropy = report["training"]["move_entropy"]
    assert len(entropy) == 1 and all(h is None or 0.0 <= h <= 0.6932 for h in entropy), entropy
    invalid = report["per_game"]["kuhn_poker"]["invalid_move_rate"]
    assert set(invalid) == set(report["iterates"]) and all(0.0 <= r <= 1.0 for r in invalid.values())
