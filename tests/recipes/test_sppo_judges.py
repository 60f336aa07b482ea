"""SPPO's demo config run end to end through the CLI with the judges users have: an LLM judge (a tiny
random Llama with the demo's tokenizer) with a python second judge, and a python reward judge, then
reranked best-of-n by it."""

import json
import shutil

import numpy as np
import pytest
import torch
import transformers

from nash_jax import runs
from nash_jax.cli import main
from nash_jax.tasks.synthetic import synthetic
from tests.unit.judges.tiny_decoders import python_judge_module  # noqa: F401  (the fixture)
from tests.recipes.conftest import small_config

pytestmark = pytest.mark.long

ONE_ITERATION = {"sppo": {"iterations": 1}, "eval": {"prompts": 8, "samples_per_prompt": 2,
                                                     "average_iterates": False}}


@pytest.fixture(scope="module")
def llm_judge_dir(tmp_path_factory):
    """A tiny random Llama over the synthetic task's tokenizer, saved as an HF directory."""
    path = tmp_path_factory.mktemp("demo_judge")
    tokenizer = transformers.AutoTokenizer.from_pretrained(synthetic.TOKENIZER_DIR)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=8, max_position_embeddings=256)
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    for item in synthetic.TOKENIZER_DIR.iterdir():
        shutil.copy(item, path / item.name)
    return path


def test_demo_runs_with_an_llm_judge_and_a_python_second_judge(llm_judge_dir, python_judge_module,
                                                               tmp_path):
    config = small_config(tmp_path, **ONE_ITERATION, judge={
        "kind": "llm", "path": str(llm_judge_dir), "labels": ["plain", "witty"], "prompts_per_call": 16})
    run_dir = tmp_path / "run"
    second = f"eval.second_judge={{kind: python, function: '{python_judge_module}:longer_wins'}}"
    assert main(["run", str(config), f"run_dir={run_dir}", second]) == 0
    judged = runs.read_table(run_dir / "iter_0" / "judgments.parquet")
    inconsistency = np.asarray(judged["position_inconsistency"])
    assert inconsistency.shape == (len(judged["matrix"]),) and ((0 <= inconsistency) & (inconsistency <= 1)).all()
    matrices = np.asarray(judged["matrix"]).reshape(len(inconsistency), 3, 3)
    np.testing.assert_array_equal(matrices + np.swapaxes(matrices, 1, 2), 1.0)
    report = json.loads((run_dir / "report.json").read_text())
    assert report["judge"] == "llm" and report["second_judge"] == "python"
    assert report["per_iteration"][0]["position_inconsistency"] == pytest.approx(inconsistency.mean())
    assert "Position inconsistency of the judge" in (run_dir / "report.md").read_text()
    table = np.asarray(report["win_rate_table_second_judge"])
    np.testing.assert_allclose(table + table.T, 1.0)


def test_demo_runs_with_a_python_reward_judge_and_reranks_with_it(python_judge_module, tmp_path, capsys):
    config = small_config(tmp_path, **ONE_ITERATION, judge={
        "kind": "python", "function": f"{python_judge_module}:length_reward", "returns": "rewards"})
    run_dir = tmp_path / "run"
    assert main(["run", str(config), f"run_dir={run_dir}"]) == 0
    judged = runs.read_table(run_dir / "iter_0" / "judgments.parquet")
    assert "position_inconsistency" not in judged
    samples = runs.read_table(run_dir / "iter_0" / "samples.parquet")
    lengths = np.array([[len(r) for r in rs] for rs in samples["responses"]])
    wins = np.asarray(judged["win_rates"])
    # the longer response wins under the length reward: win rates rank as lengths do
    assert all(np.argmax(w) in np.flatnonzero(l == l.max()) for w, l in zip(wins, lengths))
    assert main(["rerank", str(run_dir), "--n", "2"]) == 0
    report = json.loads((run_dir / "report.json").read_text())
    assert report["best_of_n"]["judge"] == "python" and report["best_of_n"]["n"] == 2
