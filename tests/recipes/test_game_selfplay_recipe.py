"""Recipe game_selfplay: role-conditioned advantages inside the recipe (the notes' §4 G vector; a
first-mover edge that RAE stops crediting and GRPO credits forever), one tiny end-to-end run through
`nash-jax run` that resumes after SIGKILL to the same parameters, baselines and losses, and the shipped
demo's claim (exact exploitability well below the warm start's)."""

import json
import signal

import numpy as np
import pytest
import yaml

from nash_jax.recipes import game_selfplay as recipe
from nash_jax.runs import read_metrics
from nash_jax.tasks.games import games
from tests.recipes.conftest import CONFIGS, assert_same_parameters, run_cli, run_two_processes

pytestmark = pytest.mark.long

KUHN, TTT = games.TextGame("kuhn_poker"), games.TextGame("tic_tac_toe")
GAME_INDEX = {"kuhn_poker": 0, "tic_tac_toe": 1}


def finished(game, index, rewards, seats=(0, 1)):
    """A finished game with one turn per seat in `seats` and the given rewards."""
    record = games.GameRecord(game, index, (None, None))
    record.turns = [games.Turn(seat, games.Move(game.words[0], [1, 2], [3, 4], [-0.5, -0.1]), 0)
                    for seat in seats]
    record.rewards = np.asarray(rewards, np.float64)
    return record


def test_rae_in_the_recipe_follows_the_notes_vector_g_and_drops_zero_advantage_turns():
    """(Kuhn P0, +1), (Kuhn P1, −1), (Kuhn P0, −1), (Kuhn P1, +1), (Kuhn P0, +1), (Kuhn P1, −1),
    (TTT P0, 0) with decay 0.95 from zero baselines."""
    records = [finished(KUHN, 0, [1, -1]), finished(KUHN, 1, [-1, 1]), finished(KUHN, 2, [1, -1]),
               finished(TTT, 3, [0, 0], seats=(0,))]
    baselines = np.zeros(4, np.float32)
    trajectories, rewards, a, new = recipe.trajectory_advantages(records, baselines, GAME_INDEX,
                                                                 mode="rae", decay=0.95)
    assert [(r.index, seat) for r, seat in trajectories] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0),
                                                             (2, 1), (3, 0)]
    np.testing.assert_allclose(a, [1.0, -1.0, -1.05, 1.05, 1.0025, -1.0025, 0.0], atol=1e-6)
    np.testing.assert_allclose(new, [0.047625, -0.047625, 0.0, 0.0], atol=1e-6)
    # intermediate Kuhn seat-0 baselines 0.05, then −0.0025, then 0.047625: one game at a time
    b = np.zeros(4, np.float32)
    seen = []
    for record in records[:3]:
        _, _, _, b = recipe.trajectory_advantages([record], b, GAME_INDEX, mode="rae", decay=0.95)
        seen.append(float(b[0]))
    np.testing.assert_allclose(seen, [0.05, -0.0025, 0.047625], atol=1e-6)
    rows = recipe.turn_rows(trajectories, a, gamma=1.0, drop_zero=True)
    assert len(rows) == 6 and all(value != 0 for _, value in rows)  # the TTT turn is dropped
    assert len(recipe.turn_rows(trajectories, a, gamma=1.0, drop_zero=False)) == 7


def test_turn_discount_spreads_a_players_advantage_over_its_turns():
    record = finished(KUHN, 0, [1, -1], seats=(0, 1, 0, 1, 0))
    trajectories, _, a, _ = recipe.trajectory_advantages([record], np.zeros(2, np.float32),
                                                         {"kuhn_poker": 0}, mode="none", decay=0.95)
    rows = recipe.turn_rows(trajectories, a, gamma=0.9, drop_zero=True)
    np.testing.assert_allclose([v for t, v in rows if t.seat == 0], [0.81, 0.9, 1.0], atol=1e-6)
    np.testing.assert_allclose([v for t, v in rows if t.seat == 1], [-0.9, -1.0], atol=1e-6)


def test_a_first_mover_advantage_does_not_become_permanent_credit():
    """A game in which seat 0 always wins: under RAE the seat baselines learn it and the advantages
    decay towards 0; GRPO over the two seats of a game gives seat 0 the same credit forever."""
    b = np.zeros(2, np.float32)
    seat0 = {"rae": [], "grpo": []}
    for step in range(25):
        records = [finished(KUHN, i, [1, -1]) for i in range(8)]
        trajectories, _, a, b = recipe.trajectory_advantages(records, b, {"kuhn_poker": 0},
                                                             mode="rae", decay=0.95)
        seat0["rae"].append(float(np.mean(a[0::2])))
        _, _, g, _ = recipe.trajectory_advantages(records, None, {"kuhn_poker": 0}, mode="grpo",
                                                  decay=0.95)
        seat0["grpo"].append(float(np.mean(g[0::2])))
        np.testing.assert_allclose(g[1::2], -g[0::2], atol=1e-6)
    assert seat0["rae"][0] > 0.7 and abs(seat0["rae"][-1]) < 1e-3, seat0["rae"]
    assert np.all(np.diff(seat0["rae"]) < 0), seat0["rae"]
    np.testing.assert_allclose(b, [1 - 0.95 ** 200, -(1 - 0.95 ** 200)], atol=1e-5)
    np.testing.assert_allclose(seat0["grpo"], 0.7071063, atol=1e-5)  # ±1/√2, every step


def test_the_pg_batch_aligns_behaviour_log_probs_with_response_tokens():
    rows = [(games.Turn(0, games.Move("bet", [5, 6, 7], [8, 9], [-0.7, -0.1]), 1), 0.5),
            (games.Turn(1, games.Move("pass", [5, 6], [10, 3], [-0.2, -0.3]), 0), -1.0)]
    batch = recipe.pg_batch(rows, pad_id=1, shards=8, capacity=48, width=8)
    assert batch["tokens"].shape == (8, 8) and batch["advantage"].tolist()[:3] == [0.5, -1.0, 0.0]
    np.testing.assert_array_equal(batch["tokens"][0, -5:], [5, 6, 7, 8, 9])
    np.testing.assert_allclose(batch["behaviour_logp"][0, -2:], [-0.7, -0.1])
    assert not batch["behaviour_logp"][0, :-2].any()
    np.testing.assert_array_equal(batch["loss_mask"][1], [0] * 6 + [1, 1])
    assert not batch["loss_mask"][2:].any()  # padding rows: masked copies
    # the planned width whenever the rows fit it (one program a run), else the power of two that does;
    # rows to a power of two, or to the step's capacity (the most turns) when that is fewer
    assert recipe.pg_batch(rows, pad_id=1, shards=8, capacity=48, width=24)["tokens"].shape == (8, 24)
    assert recipe.pg_batch(rows, pad_id=1, shards=8, capacity=48, width=4)["tokens"].shape == (8, 8)
    assert recipe.pg_batch(rows * 17, pad_id=1, shards=8, capacity=44, width=8)["tokens"].shape == (48, 8)
    assert recipe.pg_batch(rows * 17, pad_id=1, shards=8, capacity=100, width=8)["tokens"].shape == (64, 8)


def test_the_move_entropy_bonus_reads_the_policy_the_exact_evaluation_reads():
    """A tiny random Llama at every Kuhn information state: each valid move's bonus is
    coef · (−log π(a|s) − H(π(·|s))) with π the evaluator's renormalised first-token policy there; an
    invalid move gets none; turn_rows adds the bonus before dropping zero advantages."""
    from flax import nnx

    from nash_jax import parallel
    from nash_jax.models.llama import Llama, LlamaConfig
    from nash_jax.models.tokenizer import load_tokenizer
    from nash_jax.tasks.games import game_eval

    tokenizer = load_tokenizer(games.TOKENIZER_DIR)
    model = Llama(LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                              num_layers=1, num_heads=2, num_kv_heads=1, head_dim=8), rngs=nnx.Rngs(0))
    evaluator = game_eval.ExactEvaluator.build(KUHN, tokenizer)
    mesh = parallel.make_mesh()
    probs, _ = evaluator.probabilities(game_eval.first_token_logprobs(
        model, evaluator.prompt_ids, mesh, tokenizer.pad_token_id))
    moves = [(KUHN, games.Turn(0, games.Move(KUHN.words[s % 2], ids, [1], [0.0]), s % 2, (0, 1)))
             for s, ids in enumerate(evaluator.prompt_ids)]
    moves.append((KUHN, games.Turn(1, games.Move("fold", evaluator.prompt_ids[0], [1], [0.0]), None,
                                   (0, 1))))
    bonus, entropy = recipe.move_entropy_bonuses(moves, model, tokenizer, mesh, tokenizer.pad_token_id,
                                                 coef=0.3)
    p = probs[np.arange(12), np.arange(12) % 2]
    h = -(probs * np.log(probs)).sum(axis=1)
    np.testing.assert_allclose(bonus[:12], 0.3 * (-np.log(p) - h), atol=1e-5)
    np.testing.assert_allclose(entropy[:12], h, atol=1e-5)
    assert bonus[12] == 0.0 and entropy[12] == 0.0
    # a run pads the turns' prompts to its prompt limit (one program a run): the same policy read
    padded, _ = recipe.move_entropy_bonuses(moves, model, tokenizer, mesh, tokenizer.pad_token_id,
                                            coef=0.3, width=48)
    np.testing.assert_allclose(padded, bonus, atol=1e-5)
    record = finished(KUHN, 0, [0.0, 0.0])
    trajectories, _, a, _ = recipe.trajectory_advantages([record], None, GAME_INDEX, mode="none",
                                                         decay=0.95)
    assert recipe.turn_rows(trajectories, a, gamma=1.0, drop_zero=True) == []
    rows = recipe.turn_rows(trajectories, a, gamma=1.0, drop_zero=True, bonus=np.array([0.25, -0.5]))
    assert [v for _, v in rows] == [0.25, -0.5]


# ---------------------------------------------------------------------------------------------------
# end to end


def tiny_config(tmp, name="gsp", **game_selfplay):
    values = yaml.safe_load((CONFIGS / "kuhn_demo.yaml").read_text())
    values.update(name=name, imports=["nash_jax.recipes.game_selfplay"])
    values["warm_start"].update(steps=16, batch_size=16, hidden_size=16)
    values["train"]["checkpoint_every"] = 4
    values["game_selfplay"].update({"steps": 8, "games_per_step": 16, "snapshots": 2, "eval_every": 4,
                                    "eval_games": 8, **game_selfplay})
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One uninterrupted run and one killed after its step-4 checkpoint, then resumed."""
    tmp = tmp_path_factory.mktemp("game_selfplay")
    config = tiny_config(tmp)
    whole, killed = tmp / "whole", tmp / "killed"
    result = run_cli(config, whole)
    assert result.returncode == 0, result.stderr[-3000:]
    crashed = run_cli(config, killed, crash_at="game_selfplay:step=6")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    logged = [m["step"] for m in read_metrics(killed / "metrics.jsonl") if m["stage"] == "game_selfplay"]
    resumed = run_cli(config, killed)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return whole, killed, result, logged


def test_the_recipe_runs_end_to_end_and_reports_exact_exploitability(runs):
    whole, _, result, _ = runs
    assert "exploitability (kuhn_poker)" in result.stdout, result.stdout
    report = json.loads((whole / "report.json").read_text())
    assert report["recipe"] == "game_selfplay" and report["game"] == "kuhn_poker"
    e = report["exploitability"]
    assert e["step"] == [0, 4, 8] and len(e["value"]) == 3
    assert e["value"][0] == report["per_iterate"][0]["exploitability"]  # the warm start's
    assert len(report["policy"]) == 12
    assert all(set(p) == {"pass", "bet"} and sum(p.values()) == pytest.approx(1.0)
               for p in report["policy"].values())
    game = report["per_game"]["kuhn_poker"]
    row = game["frozen_opponents"]["pi_2"]
    assert set(row) == {"pi_0", "pi_1", "pi_2", "random"}
    assert sum(row["random"]["seat0"]) == sum(row["random"]["seat1"]) == 8
    assert set(game["first_mover_asymmetry"]) == {"pi_0", "pi_1", "pi_2"}
    assert isinstance(game["cycles"], list) and len(report["win_rate_table"]) == 3
    for name in ("report.md", "exploitability.png", "win_rates.png", "training.png",
                 "iter_1/policy/model.safetensors", "tensorboard"):
        assert (whole / name).exists(), name
    steps = [m for m in read_metrics(whole / "metrics.jsonl") if m["stage"] == "game_selfplay"]
    assert [m["step"] for m in steps] == list(range(1, 9))
    assert all(m["games"] == 16 and "baseline_kuhn_poker_seat0" in m for m in steps)


def test_a_run_killed_mid_training_resumes_to_the_uninterrupted_result(runs):
    whole, killed, _, logged = runs
    assert 4 in logged and 6 not in logged, logged
    for k in range(2):
        assert_same_parameters(killed / f"iter_{k}" / "policy", whole / f"iter_{k}" / "policy")
    ours = {m["step"]: m for m in read_metrics(whole / "metrics.jsonl") if m["stage"] == "game_selfplay"}
    theirs = {m["step"]: m for m in read_metrics(killed / "metrics.jsonl") if m["stage"] == "game_selfplay"}
    for key in ("loss", "baseline_kuhn_poker_seat0", "baseline_kuhn_poker_seat1", "reward_mean"):
        np.testing.assert_array_equal([theirs[s][key] for s in sorted(ours)],
                                      [ours[s][key] for s in sorted(ours)], err_msg=key)
    a, b = (json.loads((d / "report.json").read_text()) for d in (whole, killed))
    assert a["exploitability"] == b["exploitability"] and a["per_game"] == b["per_game"]


def test_two_processes_play_the_run_like_one(runs, tmp_path):
    """Two processes × 4 devices: the same warm start (to 1e-5) and the same games and rewards at the
    first step as one process (each process drives all games); later steps may part on a near-tie."""
    whole = runs[0]
    config = tiny_config(tmp_path, steps=2, snapshots=1)  # step 1 is compared
    codes, logs = run_two_processes(config, tmp_path / "two")
    assert codes == [0, 0], "\n\n".join(log[-3000:] for log in logs)
    assert_same_parameters(tmp_path / "two" / "init" / "policy", whole / "init" / "policy", atol=1e-5)
    ours, theirs = ([m for m in read_metrics(d / "metrics.jsonl") if m["stage"] == "game_selfplay"]
                    for d in (whole, tmp_path / "two"))
    assert [m["step"] for m in theirs] == [1, 2]  # a constant schedule: step 1 as in 8 steps
    for key in ("games", "turns", "invalid_rate", "win_rate_kuhn_poker_seat0"):
        assert theirs[0][key] == ours[0][key], key
    assert json.loads((tmp_path / "two" / "report.json").read_text())["game"] == "kuhn_poker"
