"""vLLM's samples follow the run's keys: a batch redone by a fresh worker (a stage resumed after a kill)
equals the same batch of an uninterrupted stage, and another key draws other samples. One tiny random
Llama (heads of 32, what vLLM's CPU attention takes), T = 1, K = 3; skipped without a vLLM to run
(tests/vllm_python.py)."""

import shutil

import jax
import numpy as np
import pytest

from nash_jax.config import SamplingConfig
from nash_jax.rollout.vllm_engine import sample_policy_vllm
from tests.tiny_hf import COMMON, random_torch_model
from tests.vllm_python import vllm_python

pytestmark = pytest.mark.long

PROMPTS = [[3 + (7 * i + j) % 90 for j in range(5 + 3 * i)] for i in range(6)]


def sample(model_dir, work_dir, python, seed=0):
    sampling = SamplingConfig(num_samples=3, temperature=1.0, engine="vllm", vllm_python=python,
                              prompts_per_batch=2)
    return sample_policy_vllm(model_dir, PROMPTS, num_samples=3, sampling=sampling,
                              key_of=lambda b: jax.random.fold_in(jax.random.key(seed), b),
                              max_new_tokens=12, eos_ids=[2], dtype="float32", work_dir=work_dir)


def test_a_batch_redone_by_a_fresh_worker_equals_the_uninterrupted_one_and_keys_matter(tmp_path):
    python = vllm_python()
    model_dir = tmp_path / "policy"
    random_torch_model("LlamaConfig", "LlamaForCausalLM",
                       {**COMMON, "hidden_size": 128, "num_attention_heads": 4, "head_dim": 32,
                        "intermediate_size": 96}).save_pretrained(model_dir)
    whole = sample(model_dir, tmp_path / "whole", python)
    shutil.copytree(tmp_path / "whole", tmp_path / "resumed")
    (tmp_path / "resumed" / "batch_000001.json").unlink()  # as if killed before batch 1 was written
    resumed = sample(model_dir, tmp_path / "resumed", python)
    assert resumed["response_ids"] == whole["response_ids"]
    np.testing.assert_allclose(resumed["logp_vllm"], whole["logp_vllm"], atol=1e-5)
    other = sample(model_dir, tmp_path / "other", python, seed=1)
    assert other["response_ids"] != whole["response_ids"]
    assert len({tuple(r) for rs in whole["response_ids"] for r in rs}) > len(PROMPTS)  # K differ
