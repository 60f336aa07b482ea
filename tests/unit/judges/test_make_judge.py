"""`nash_jax.judges.make_judge` over every kind, judges by import path, and `nash-jax judge` with any
judge."""

import json

import numpy as np
import pytest
from scipy.special import expit

from nash_jax.engine import judging
from nash_jax.cli import main
from nash_jax.config import JudgeConfig, build
from nash_jax.judges import BUILDERS, CHECKS, check_judge, make_judge
from tests.unit.judges.tiny_decoders import LABELS

KINDS = {"pairrm", "synthetic", "file", "llm", "reward_model", "python"}


def test_every_configurable_kind_has_a_check_and_a_builder():
    import typing

    kinds = set(typing.get_args(typing.get_type_hints(JudgeConfig)["kind"]))
    assert kinds == KINDS == set(BUILDERS) == set(CHECKS)
    assert judging.make_judge(JudgeConfig()).prob_matrix(["write a reply about rivers ."],
                                                            [["plain", "witty"]]).shape == (1, 2, 2)


def test_python_judge_from_a_module_on_a_temporary_path(python_judge_module):
    prefs = make_judge(JudgeConfig(kind="python", function=f"{python_judge_module}:longer_wins"))
    pref = prefs.prob_matrix(["q"], [["a", "abc", "ab"]])[0]
    np.testing.assert_array_equal(pref, [[0.5, 0, 0], [1, 0.5, 1], [1, 0, 0.5]])
    rewards = make_judge(JudgeConfig(kind="python", function=f"{python_judge_module}:length_reward",
                                     returns="rewards"))
    np.testing.assert_allclose(rewards.prob_matrix(["q"], [["a", "abc"]])[0, 1, 0], expit(0.2))
    np.testing.assert_allclose(rewards.rewards(["q", "q"], ["ab", "abcd"]), [0.2, 0.4])
    broken = make_judge(JudgeConfig(kind="python", function=f"{python_judge_module}:not_antisymmetric"))
    with pytest.raises(ValueError, match=r"FunctionJudge returned, for prompt 0: .*P\[0,1\]"):
        broken.prob_matrix(["q"], [["a", "b"]])


def test_python_judge_import_failures_name_the_module_path(python_judge_module):
    with pytest.raises(ValueError, match=r"judge.function='no_such_pkg.judges:f': cannot import module "
                                         r"'no_such_pkg.judges' \(ModuleNotFoundError"):
        make_judge(JudgeConfig(kind="python", function="no_such_pkg.judges:f"))
    with pytest.raises(ValueError, match=rf"eval.second_judge.function='{python_judge_module}:nope': "
                                         rf"module '{python_judge_module}' \(.*\.py\) has no callable"):
        check_judge(JudgeConfig(kind="python", function=f"{python_judge_module}:nope"),
                    "eval.second_judge")
    with pytest.raises(ValueError, match=r"expected \"package.module:name\""):
        make_judge(JudgeConfig(kind="python", function="just_a_module"))
    with pytest.raises(ValueError, match="judge.kind=python needs judge.function"):
        build(JudgeConfig, {"kind": "python"}, "judge")


def test_judge_command_takes_a_python_judge_and_an_llm_judge(python_judge_module, tiny_judge_dir,
                                                             tmp_path, capsys):
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps({"prompt": "the fox", "candidates": ["dog", "lazy dog", "fox"]})
                        + "\n")
    assert main(["judge", "--prompts", str(requests), "kind=python",
                 f"function={python_judge_module}:length_reward", "returns=rewards"]) == 0
    line = json.loads(capsys.readouterr().out)
    np.testing.assert_allclose(line["matrix"][1][0], expit(0.5))
    path = tiny_judge_dir("llm")[0]
    assert main(["judge", "--model", str(path), "--prompts", str(requests), "kind=llm",
                 "template={prompt} over {a} the {b} world", f"labels=[{LABELS[0]}, {LABELS[1]}]"]) == 0
    line = json.loads(capsys.readouterr().out)
    matrix = np.array(line["matrix"])
    np.testing.assert_array_equal(matrix + matrix.T, 1.0)
    assert 0.0 <= line["position_inconsistency"] <= 1.0
    assert main(["judge", "--prompts", str(requests), "kind=llm", "path=/nowhere"]) == 2
    assert "judge.path=/nowhere: does not exist" in capsys.readouterr().err


def test_every_kind_lists_the_fields_it_reads():
    assert set(JudgeConfig.READS) == KINDS


@pytest.mark.parametrize("key", ["judge", "eval.second_judge"])
@pytest.mark.parametrize("kind, setting", [
    ("pairrm", {"function": "pkg:f"}), ("pairrm", {"returns": "rewards"}),
    ("pairrm", {"template": "{prompt} {a} {b}"}), ("pairrm", {"labels": ["x", "y"]}),
    ("pairrm", {"max_tokens": 8}), ("pairrm", {"dtype": "bfloat16"}), ("synthetic", {"path": "p"}),
    ("python", {"batch_size": 4}), ("reward_model", {"mode": "blender"}), ("file", {"labels": ["x", "y"]}),
])
def test_a_field_its_kind_does_not_read_is_refused_naming_the_key_and_kind(key, kind, setting):
    (name, value), = setting.items()
    values = {"kind": kind, **({"function": "pkg:f"} if kind == "python" else {}), **setting}
    with pytest.raises(ValueError, match=rf"^{key}.{name}=.*: {key}.kind={kind} does not read it"):
        build(JudgeConfig, values, key)


def test_fields_at_their_defaults_or_read_by_the_kind_are_accepted():
    build(JudgeConfig, {"kind": "pairrm", "path": "p", "mode": "blender", "batch_size": 8,
                        "labels": ["A", "B"], "max_tokens": 4096, "prompts_per_call": 2}, "judge")
    build(JudgeConfig, {"kind": "llm", "path": "p", "labels": ["yes", "no"], "max_tokens": 8,
                        "template": "{prompt} {a} {b}", "dtype": "bfloat16"}, "judge")


def test_judge_command_refuses_a_python_setting_without_kind_python(tmp_path, capsys):
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps({"prompt": "q", "candidates": ["a", "b"]}) + "\n")
    assert main(["judge", "--model", str(tmp_path), "--prompts", str(requests), "function=pkg:f"]) == 2
    assert "judge.function='pkg:f': judge.kind=pairrm does not read it" in capsys.readouterr().err


@pytest.mark.parametrize("labels", [["A", "A"], ["A"], ["A", "B", "C"], ["A", ""], ["", " "]])
def test_labels_must_be_two_different_non_empty_strings(labels):
    with pytest.raises(ValueError, match=r"eval.second_judge.labels=.*; expected two different non-empty"):
        build(JudgeConfig, {"kind": "llm", "labels": labels}, "eval.second_judge")
    with pytest.raises(ValueError, match=r"^judge.labels=.*; expected two different non-empty"):
        check_judge(JudgeConfig(kind="llm", labels=labels))


def test_python_judge_errors_name_the_second_judges_key(python_judge_module):
    with pytest.raises(ValueError, match=r"eval.second_judge.kind=python needs eval.second_judge.function"):
        build(JudgeConfig, {"kind": "python"}, "eval.second_judge")
    with pytest.raises(ValueError, match=rf"^eval.second_judge.function='{python_judge_module}:nope'"):
        make_judge(JudgeConfig(kind="python", function=f"{python_judge_module}:nope"),
                   key="eval.second_judge")


def test_judge_command_asks_prompts_per_call_prompts_at_a_time(tmp_path, monkeypatch, capsys):
    import importlib

    (tmp_path / "counting_judge.py").write_text(
        "import numpy as np\ncalls = []\n"
        "def judge(prompts, candidates):\n"
        "    calls.append(len(prompts))\n"
        "    return np.full((len(prompts), 2, 2), 0.5)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps({"prompt": f"q{i}", "candidates": ["a", "b"]}) + "\n"
                                for i in range(5)))
    assert main(["judge", "--prompts", str(requests), "kind=python", "function=counting_judge:judge",
                 "prompts_per_call=2"]) == 0
    assert [json.loads(line)["index"] for line in capsys.readouterr().out.splitlines()] == [0, 1, 2, 3, 4]
    assert importlib.import_module("counting_judge").calls == [2, 2, 1]
