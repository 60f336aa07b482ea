"""The PreferenceModel contract, the simple judges, and `nash-jax judge`."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from nash_jax.judges.base import PreferenceModel, validate_prob_matrices
from nash_jax.judges.simple import CallableJudge, FileJudge, RewardJudge, text_hash
from tests.unit.judges.tiny_pairrm import CANDIDATES, PROMPTS
from tests.processes import USER_CLI

ROOT = Path(__file__).resolve().parents[3]


def test_reward_judge_is_bradley_terry_on_the_rewards():
    judge = RewardJudge(lambda prompts, responses: [len(r) for r in responses])
    pref = judge.prob_matrix(["x"], [["a", "bbb", "cc"]])[0]
    assert pref[1, 0] == pytest.approx(1 / (1 + np.exp(-2)))
    np.testing.assert_allclose(judge.prob(["x", "y"], ["aa", "b"], ["a", "bb"]),
                               [1 / (1 + np.exp(-1)), 1 / (1 + np.exp(1))])


def test_callable_judge_asks_each_unordered_pair_once_and_can_be_cyclic():
    calls = []
    beats = {("rock", "scissors"), ("scissors", "paper"), ("paper", "rock")}

    def rps(prompt, a, b):
        calls.append((a, b))
        return 1.0 if (a, b) in beats else 0.0

    pref = CallableJudge(rps).prob_matrix(["play"], [["rock", "paper", "scissors"]])[0]
    assert len(calls) == 3
    np.testing.assert_array_equal(pref, [[0.5, 0, 1], [1, 0.5, 0], [0, 1, 0.5]])


def test_file_judge_reads_hash_keyed_preferences_in_either_orientation(tmp_path):
    path = tmp_path / "prefs.jsonl"
    rows = [{"prompt": text_hash("q"), "a": text_hash("x"), "b": text_hash("y"), "p": 0.8},
            {"prompt": text_hash("q"), "a": text_hash("z"), "b": text_hash("x"), "p": 0.3}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    judge = FileJudge(path)
    with pytest.raises(ValueError, match="has no preference for prompt 0"):
        judge.prob_matrix(["q"], [["x", "y", "z"]])
    pref = judge.prob_matrix(["q"], [["x", "y"]])[0]
    assert pref[0, 1] == pytest.approx(0.8)
    assert judge.prob(["q"], ["x"], ["z"])[0] == pytest.approx(0.7)
    path.write_text('{"prompt": "abc", "a": "d"}\n')
    with pytest.raises(ValueError, match=r"prefs.jsonl:1: expected a JSON object with prompt, a, b"):
        FileJudge(path)


def test_judge_output_is_validated_naming_the_prompt_and_entry():
    class Broken(PreferenceModel):
        def _prob_matrix(self, prompts, candidates):
            pref = np.full((2, 2, 2), 0.5)
            pref[1, 0, 1] = np.nan
            return pref

    with pytest.raises(ValueError, match=r"Broken returned, for prompt 1: P\[0,1\]=nan is not a finite"):
        Broken().prob_matrix(["a", "b"], [["x", "y"], ["z", "w"]])
    with pytest.raises(ValueError, match=r"expected \[B, K, K\]"):
        validate_prob_matrices(np.zeros((2, 3)))


def test_judge_command_prints_one_matrix_per_prompt(pairrm_dir, tmp_path):
    path = pairrm_dir[0]
    requests = tmp_path / "requests.jsonl"
    requests.write_text("\n".join(json.dumps({"prompt": p, "candidates": c})
                                  for p, c in zip(PROMPTS, CANDIDATES)))
    result = subprocess.run([*USER_CLI, "judge", "--model", str(path),
                             "--prompts", str(requests)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["index"] for line in lines] == [0, 1, 2]
    matrix = np.array(lines[1]["matrix"])
    np.testing.assert_allclose(matrix + matrix.T, 1.0, atol=1e-6)
    np.testing.assert_allclose(lines[1]["win_rates"], matrix.mean(axis=1))
    requests.write_text('{"prompt": "x", "candidates": "not a list"}\n')
    bad = subprocess.run([*USER_CLI, "judge", "--model", str(path),
                          "--prompts", str(requests)], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "requests.jsonl:1: expected" in bad.stderr


def test_reward_models_return_one_finite_reward_per_response_or_say_which_is_wrong():
    from nash_jax.judges.simple import CallableReward

    lengths = CallableReward(lambda prompts, responses: [len(r) for r in responses])
    np.testing.assert_array_equal(lengths.rewards(["p", "q"], ["ab", "abcd"]), [2.0, 4.0])
    with pytest.raises(ValueError, match=r"CallableReward returned, for response 1: reward=nan; "
                                         r"expected a finite number"):
        CallableReward(lambda p, r: [0.0, float("nan")]).rewards(["p", "q"], ["a", "b"])
    with pytest.raises(ValueError, match=r"returned shape \[3\]; expected \[2\], one reward per response"):
        CallableReward(lambda p, r: [0.0, 1.0, 2.0]).rewards(["p", "q"], ["a", "b"])
    with pytest.raises(ValueError, match="2 prompts but 1 responses"):
        lengths.rewards(["p", "q"], ["a"])
    with pytest.raises(ValueError, match=r"returned \['not a number', .*… \(\d+ characters\); "
                                         r"expected 200 numbers") as refused:  # not all 200 of them
        CallableReward(lambda p, r: ["not a number"] * 200).rewards(["p"] * 200, ["a"] * 200)
    assert len(str(refused.value)) < 400
    # the Bradley-Terry judge over a reward model is the same judge as over its function
    judge = RewardJudge(lengths)
    np.testing.assert_allclose(judge.prob(["p"], ["abc"], ["a"]), [1 / (1 + np.exp(-2.0))])


@pytest.mark.parametrize("batch_size, shards, per_item, expected", [
    (60, 1, 12, 5), (96, 1, 12, 8), (11, 1, 12, 1), (60, 1, 1, 60), (6, 1, 1, 6), (60, 8, 1, 56),
    (60, 8, 12, 8), (3, 8, 1, 8), (24, 2, 12, 2), (36, 2, 12, 2)])
def test_per_call_never_exceeds_batch_size_beyond_one_item_per_shard(batch_size, shards, per_item,
                                                                     expected):
    from nash_jax.judges.on_mesh import per_call

    assert per_call(batch_size, shards, per_item) == expected
