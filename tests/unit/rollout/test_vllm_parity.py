"""Policies exported by nash_jax load in vLLM and decode greedily the same tokens as nash_jax's sampler
(fp32): SmolLM2-135M-Instruct on chat prompts, and a tiny random Gemma 3 (sliding windows, QK-norm,
soft-capping) on random prompts. vLLM runs in its worker subprocess (sampling.vllm_python), as a run
uses it; skipped without a vLLM to run (tests/vllm_python.py)."""

import jax
import numpy as np
import pytest
import torch
import transformers

from nash_jax.config import SamplingConfig
from nash_jax.models import load_pretrained, save_pretrained
from nash_jax.models.tokenizer import load_tokenizer
from nash_jax.rollout.sampling import eos_ids_of, generate, generate_text
from nash_jax.rollout.vllm_engine import sample_policy_vllm
from tests.vllm_python import vllm_python

pytestmark = pytest.mark.long

PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.",
           "Explain in one sentence why the sky is blue.", "List three prime numbers."]
NEW_TOKENS = 32


def vllm_greedy(policy_dir, prompt_ids, eos_ids, work_dir, python):
    sampling = SamplingConfig(num_samples=1, temperature=0.0, engine="vllm", vllm_python=python,
                              prompts_per_batch=len(prompt_ids))
    return sample_policy_vllm(policy_dir, prompt_ids, num_samples=1, sampling=sampling,
                              key_of=lambda b: jax.random.key(b), max_new_tokens=NEW_TOKENS,
                              eos_ids=eos_ids, dtype="float32", work_dir=work_dir)


def first_difference(ours, theirs):
    """A message naming the first prompt whose tokens differ, or None."""
    for b, (a, v) in enumerate(zip(ours, theirs)):
        if a != v:
            at = next((i for i, (x, y) in enumerate(zip(a, v)) if x != y), min(len(a), len(v)))
            return f"prompt {b}: first difference at token {at}: nash_jax {a} vs vLLM {v}"
    return None


def test_exported_smollm2_decodes_greedily_the_same_in_vllm(smollm2_dir, tmp_path):
    python = vllm_python()
    model, tokenizer = load_pretrained(smollm2_dir), load_tokenizer(smollm2_dir)
    save_pretrained(model, tmp_path / "export")  # the export is what vLLM loads
    _, samples = generate_text(model, tokenizer, PROMPTS, num_samples=1, max_new_tokens=NEW_TOKENS,
                               temperature=0.0, key=jax.random.key(0))
    ours = [samples.tokens[b, 0, :samples.lengths[b, 0]].tolist() for b in range(len(PROMPTS))]
    prompt_ids = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=True,
                                                add_generation_prompt=True, return_dict=True)["input_ids"]
                  for p in PROMPTS]
    theirs = vllm_greedy(tmp_path / "export", prompt_ids, eos_ids_of(tokenizer), tmp_path / "work",
                         python)
    ids = [r[0] for r in theirs["response_ids"]]
    assert first_difference(ours, ids) is None, first_difference(ours, ids)
    gap = np.max(np.abs(np.subtract(samples.logprobs_raw[:, 0].sum(-1), np.ravel(theirs["logp_vllm"]))))
    print(f"SmolLM2 greedy: {sum(map(len, ids))} tokens equal; max |Σ log π nash_jax − vLLM| = {gap:.2e}")
    assert gap < 1e-2, gap


def tiny_gemma3(path):
    """A random transformers Gemma 3 with vLLM-CPU-sized heads (head_dim 32), saved at `path`."""
    config = transformers.Gemma3TextConfig(
        vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
        sliding_window=8, query_pre_attn_scalar=32, final_logit_softcapping=2.0,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"],
        eos_token_id=None, bos_token_id=None, pad_token_id=0)
    torch.manual_seed(0)
    model = transformers.Gemma3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_((0.3 if name.endswith("norm.weight") else 0.15) * torch.randn_like(p))
    model.save_pretrained(path)
    return path


def test_exported_tiny_gemma3_decodes_greedily_the_same_in_vllm(tmp_path):
    python = vllm_python()
    model = load_pretrained(tiny_gemma3(tmp_path / "torch"))
    save_pretrained(model, tmp_path / "export")
    rng = np.random.default_rng(0)
    prompt_ids = [rng.integers(1, 101, n).tolist() for n in (5, 12, 20)]
    samples = generate(model, prompt_ids, num_samples=1, max_new_tokens=NEW_TOKENS, temperature=0.0,
                       key=jax.random.key(0))
    ours = [samples.tokens[b, 0, :samples.lengths[b, 0]].tolist() for b in range(len(prompt_ids))]
    theirs = vllm_greedy(tmp_path / "export", prompt_ids, [], tmp_path / "work", python)
    ids = [r[0] for r in theirs["response_ids"]]
    assert first_difference(ours, ids) is None, first_difference(ours, ids)
    print(f"tiny Gemma 3 greedy: {sum(map(len, ids))} tokens equal")
