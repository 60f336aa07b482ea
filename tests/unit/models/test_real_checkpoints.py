"""Real weights: SmolLM2-135M-Instruct (Llama, Q4_1) imported with `import-gguf` against transformers'
own GGUF loader (the PyTorch reference) — logits, greedy decoding with the chat template, the sampler's
log-probs, the exported policy, a bf16 load — and Gemma-3-270M (base, Q4_K_M): its config and tensor
names, fp32 logits and greedy raw-text decoding against the same loader."""

import json

import jax
import jax.numpy as jnp
import gguf
import numpy as np
import pytest
import torch
import transformers
from safetensors import safe_open

from nash_jax.models import load_pretrained, load_tokenizer, save_pretrained
from nash_jax.rollout.sampling import eos_ids_of, generate_text
from nash_jax.models.packaged import gemma3_gguf, smollm2_gguf

pytestmark = pytest.mark.long

PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.",
           "Explain in one sentence why the sky is blue.", "List three prime numbers."]
TEXTS = ["The quick brown fox jumps over the lazy dog.", "def fibonacci(n):\n    if n < 2:",
         "In 1969, the first humans landed on", "Once upon a time, in a small village,"]
NEW_TOKENS = 32


@pytest.fixture(scope="module")
def smollm2(smollm2_dir):
    """(nash_jax model, tokenizer, transformers model loaded from the GGUF file itself)."""
    file = smollm2_gguf()
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        file.parent, gguf_file=file.name, dtype=torch.float32).eval()
    return load_pretrained(smollm2_dir), load_tokenizer(smollm2_dir), reference


@pytest.fixture(scope="module")
def batch(smollm2):
    """TEXTS tokenised and cut to the shortest: one [B, L] forward program for every logit test."""
    tokenizer = smollm2[1]
    ids = [tokenizer(text).input_ids for text in TEXTS]
    return np.asarray([row[:min(map(len, ids))] for row in ids])


@pytest.fixture(scope="module")
def chat_samples(smollm2):
    """{temperature: (responses, Samples)} of PROMPTS with the chat template: greedy and T = 1 share
    one compiled sampler (sampling settings are traced values)."""
    model, tokenizer, _ = smollm2
    return {t: generate_text(model, tokenizer, PROMPTS, num_samples=1, max_new_tokens=NEW_TOKENS,
                             temperature=t, key=jax.random.key(0)) for t in (0.0, 1.0)}


def relative_diff(ours, theirs):
    ours, theirs = np.asarray(ours, np.float32), np.asarray(theirs, np.float32)
    return float(np.abs(ours - theirs).max() / np.abs(theirs).max())


def torch_logits(model, ids):
    with torch.no_grad():
        return model(torch.as_tensor(np.asarray(ids))).logits.float().numpy()


def chat_ids(tokenizer, prompt):
    return tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                         add_generation_prompt=True, tokenize=True)["input_ids"]


def test_fp32_logits_equal_transformers_gguf_loader(smollm2, batch):
    model, _, reference = smollm2
    ours, _ = model(jnp.asarray(batch))
    diff = relative_diff(ours, torch_logits(reference, batch))
    print(f"SmolLM2 fp32 logits: max |Δ| / max |logit| = {diff:.1e} over {len(batch)} prompts")
    assert diff <= 2e-5, diff


def test_greedy_chat_decoding_equals_transformers_generate(smollm2, chat_samples):
    _, tokenizer, reference = smollm2
    responses, samples = chat_samples[0.0]
    for i, prompt in enumerate(PROMPTS):
        ids = chat_ids(tokenizer, prompt)
        with torch.no_grad():
            out = reference.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids),
                                     dtype=torch.long), do_sample=False, max_new_tokens=NEW_TOKENS,
                                     eos_token_id=eos_ids_of(tokenizer), pad_token_id=0)
        theirs = out[0, len(ids):].numpy()
        length = samples.lengths[i, 0]
        print(f"{prompt!r} -> {responses[i][0]!r}")
        np.testing.assert_array_equal(samples.tokens[i, 0, :length], theirs[:length], err_msg=prompt)
        assert length == len(theirs) and (length >= 24 or samples.finished[i, 0]), (length, len(theirs))


def test_sampled_logprobs_equal_transformers_log_softmax(smollm2, chat_samples):
    _, tokenizer, reference = smollm2
    samples = chat_samples[1.0][1]
    worst = 0.0
    for i, prompt in enumerate(PROMPTS):
        ids, new = chat_ids(tokenizer, prompt), samples.tokens[i, 0, :samples.lengths[i, 0]]
        logits = torch_logits(reference, [ids + new.tolist()])[0, len(ids) - 1:-1]
        theirs = torch.log_softmax(torch.as_tensor(logits), -1).numpy()[np.arange(len(new)), new]
        for ours in (samples.logprobs_raw[i, 0, :len(new)], samples.logprobs[i, 0, :len(new)]):
            worst = max(worst, float(np.abs(ours - theirs).max()))
    print(f"SmolLM2 sampled-token log-probs (T = 1): max |ours - transformers log_softmax| = "
          f"{worst:.1e}")
    assert worst <= 1e-3, worst


def test_exported_policy_reloads_in_transformers_with_the_same_logits(smollm2, batch, tmp_path):
    model, tokenizer, _ = smollm2
    out = save_pretrained(model, tmp_path / "export")
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    ours, _ = model(jnp.asarray(batch))
    diff = relative_diff(ours, torch_logits(reloaded, batch))
    print(f"SmolLM2 exported and reloaded in transformers: max |Δ| / max |logit| = {diff:.1e}")
    assert diff <= 2e-5, diff
    assert transformers.AutoTokenizer.from_pretrained(out).chat_template == tokenizer.chat_template


def test_bfloat16_load_decodes_close_to_float32(smollm2, smollm2_dir, batch, chat_samples):
    """The bf16 load's next-token choices along fp32's greedy responses (teacher-forced: one forward
    pass, not a second sampler), up to its first disagreement, and its logits."""
    model, tokenizer, _ = smollm2
    bf16 = load_pretrained(smollm2_dir, dtype="bfloat16")
    fp32 = chat_samples[0.0][1]
    same = []
    for i, prompt in enumerate(PROMPTS):
        ids, new = chat_ids(tokenizer, prompt), fp32.tokens[i, 0, :fp32.lengths[i, 0]]
        logits, _ = bf16(jnp.asarray([ids + new.tolist()]))
        chosen = np.asarray(jnp.argmax(logits[0, len(ids) - 1:-1], -1))
        same.append(float(np.mean(np.cumprod(chosen == new))))
    diff = relative_diff(bf16(jnp.asarray(batch))[0], model(jnp.asarray(batch))[0])
    print(f"SmolLM2 bf16 vs fp32: greedy tokens equal up to the first difference {np.mean(same):.0%} "
          f"(per prompt {[f'{s:.0%}' for s in same]}), max |Δlogit| / max |logit| = {diff:.1e}")
    assert np.mean(same) >= 0.25 and diff <= 0.1, (same, diff)


def test_gemma3_imports_with_its_config_and_transformers_tensors(gemma3_dir):
    config = json.loads((gemma3_dir / "config.json").read_text())
    assert config["model_type"] == "gemma3_text" and config["architectures"] == ["Gemma3ForCausalLM"]
    layer_types = ["full_attention" if i % 6 == 5 else "sliding_attention" for i in range(18)]
    expected = {"num_hidden_layers": 18, "hidden_size": 640, "head_dim": 256, "vocab_size": 262144,
                "num_attention_heads": 4, "num_key_value_heads": 1, "sliding_window": 512,
                "query_pre_attn_scalar": 256, "tie_word_embeddings": True, "layer_types": layer_types,
                "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}
    assert {key: config[key] for key in expected} == expected
    with torch.device("meta"):  # the names and shapes transformers' Gemma 3 expects, no weights
        reference = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.from_pretrained(gemma3_dir))
    theirs = {k: tuple(v.shape) for k, v in reference.state_dict().items() if k != "lm_head.weight"}
    with safe_open(gemma3_dir / "model.safetensors", "np") as ours:
        assert {k: tuple(ours.get_slice(k).get_shape()) for k in ours.keys()} == theirs
        norm = ours.get_tensor("model.layers.0.input_layernorm.weight")
    raw = next(t for t in gguf.GGUFReader(gemma3_gguf(gemma3_dir.parent)).tensors
               if t.name == "blk.0.attn_norm.weight")
    # llama.cpp stores Gemma's norm weights as 1 + w (transformers' Gemma3RMSNorm computes 1 + w itself)
    np.testing.assert_array_equal(norm, np.asarray(raw.data) - np.float32(1.0))
    print(f"Gemma-3-270M: {len(theirs)} tensors named and shaped as transformers' Gemma 3 expects")


def test_gemma3_fp32_logits_and_greedy_text_equal_transformers_gguf_loader(gemma3_dir):
    file = gemma3_gguf(gemma3_dir.parent)
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        file.parent, gguf_file=file.name, dtype=torch.float32).eval()
    model, tokenizer = load_pretrained(gemma3_dir), load_tokenizer(gemma3_dir)
    ids = [tokenizer(text).input_ids for text in TEXTS]
    batch = np.asarray([row[:min(map(len, ids))] for row in ids])
    ours, _ = model(jnp.asarray(batch))
    diff = relative_diff(ours, torch_logits(reference, batch))
    prompts = TEXTS[2:]
    _, samples = generate_text(model, tokenizer, prompts, num_samples=1, max_new_tokens=24,
                               temperature=0.0, key=jax.random.key(0))
    for i, text in enumerate(prompts):
        prompt = tokenizer(text).input_ids
        with torch.no_grad():
            out = reference.generate(torch.tensor([prompt]), attention_mask=torch.ones(
                1, len(prompt), dtype=torch.long), do_sample=False, max_new_tokens=24,
                eos_token_id=eos_ids_of(tokenizer), pad_token_id=0)
        length = samples.lengths[i, 0]
        print(f"{text!r} -> {tokenizer.decode(samples.tokens[i, 0, :length])!r}")
        theirs = out[0, len(prompt):].numpy()
        np.testing.assert_array_equal(samples.tokens[i, 0, :length], theirs[:length], err_msg=text)
        assert length == len(theirs), (length, len(theirs))
    print(f"Gemma-3-270M fp32 logits: max |Δ| / max |logit| = {diff:.1e} over {len(batch)} prompts")
    assert diff <= 2e-5, diff
