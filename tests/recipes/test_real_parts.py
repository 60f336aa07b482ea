"""The paper preset's path with real parts: a Hugging Face Llama directory, a parquet prompt file read by
`datasets`, and the PairRM judge (all tiny, built here), through one SPPO iteration and the report."""

import json

import datasets
import numpy as np
import torch
import transformers

from nash_jax import engine
from nash_jax.config import load_config
from nash_jax import runs
from tests.unit.judges.tiny_pairrm import pairrm_dir  # noqa: F401  (the fixture)
from tests.recipes.conftest import CONFIGS
from tests.tiny_hf import write_tokenizer

WORDS = "the quick brown fox jumps over lazy dog hello world".split()


def test_preset_runs_on_an_hf_model_a_parquet_file_and_pairrm(tmp_path, pairrm_dir):  # noqa: F811
    model_dir = tmp_path / "policy"
    tokenizer = write_tokenizer(model_dir)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id))
    model.save_pretrained(model_dir)
    rng = np.random.default_rng(0)
    prompts = []
    while len(prompts) < 24:  # 24 distinct prompts (a run drops repeats before the split)
        prompt = " ".join(rng.choice(WORDS, size=rng.integers(2, 6)))
        prompts += [prompt] if prompt not in prompts else []
    datasets.Dataset.from_dict({"prompt": prompts}).to_parquet(str(tmp_path / "prompts.parquet"))

    config = load_config(CONFIGS / "sppo_mistral7b.yaml", [
        f"run_dir={tmp_path / 'run'}", f"model.path={model_dir}", "model.dtype=float32",
        "model.param_dtype=null", f"data.path={tmp_path / 'prompts.parquet'}",
        "data.prompts_per_iteration=16", "data.max_prompt_tokens=64", f"judge.path={pairrm_dir[0]}",
        "judge.batch_size=8", "sampling.num_samples=3", "sampling.max_new_tokens=6",
        "sampling.prompts_per_batch=8", "train.batch_size=16", "train.micro_batches=2",
        "train.checkpoint_every=2", "sppo.iterations=1", "eval.prompts=8", "eval.samples_per_prompt=1"])
    report = engine.run(config)

    judgments = np.asarray(runs.read_table(tmp_path / "run" / "iter_0" / "judgments.parquet")["matrix"])
    pref = judgments.reshape(-1, 3, 3)
    np.testing.assert_allclose(pref + pref.transpose(0, 2, 1), 1.0, atol=1e-5)
    assert np.std(pref) > 0.01  # PairRM's random weights still tell responses apart
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["stages"]["iter_0/build"]["info"]["examples"] == 32  # winner + loser × 16 prompts
    exported = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "iter_0" / "policy")
    assert exported.config.vocab_size == len(tokenizer)
    assert (tmp_path / "run" / "iter_0" / "policy" / "tokenizer.json").is_file()
    assert report["iterates"] == ["pi_0", "pi_1"] and report["judge"] == "pairrm"
