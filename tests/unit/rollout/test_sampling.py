"""The sampler against transformers' generate, exact distributions on fixed-logit models, the geometric
mixture, anchor log-probs, determinism across meshes, and compile-once bucketing."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from scipy.stats import chisquare

from nash_jax import parallel
from nash_jax.rollout import sampling
from nash_jax.core.losses import sequence_logprobs
from nash_jax.models import load_pretrained
from nash_jax.models.tokenizer import load_tokenizer
from nash_jax.models.llama import Llama, LlamaConfig
from nash_jax.parallel.padding import left_pad
from nash_jax.rollout.sampling import generate, generate_text, mixture_generate
from tests.tiny_hf import write_tokenizer

PROMPTS = [[5, 6, 7], list(range(10, 21)), [42], [7, 8, 9, 10, 11, 12]]
KEY = jax.random.PRNGKey(0)


def fixed_logits_model(logits):
    """A decoder whose next-token logits are `logits` whatever the input (no layers, equal embeddings)."""
    logits = np.asarray(logits, np.float32)
    vocab = hidden = len(logits)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=4, num_layers=0,
                         num_heads=1, num_kv_heads=1, head_dim=4, rms_norm_eps=1e-12)
    model = Llama(config, rngs=nnx.Rngs(0))
    model.embed.set_value(jnp.ones((vocab, hidden)))  # RMS 1: the final norm leaves it alone
    model.lm_head.set_value(jnp.asarray(logits[:, None] * np.ones((1, hidden)) / hidden))
    return model


def first_tokens(model, n, seed=0, **sampling_args):
    s = generate(model, [[0]], num_samples=n, max_new_tokens=1, key=jax.random.PRNGKey(seed),
                 **sampling_args)
    return s.tokens[0, :, 0], s.logprobs[0, :, 0], s.logprobs_raw[0, :, 0]


def assert_frequencies(tokens, probs):
    counts = np.bincount(tokens, minlength=len(probs))
    support = probs > 0
    assert counts[~support].sum() == 0, f"sampled outside the support: {counts}"
    if support.sum() == 1:
        return
    result = chisquare(counts[support], probs[support] / probs[support].sum() * counts.sum())
    assert result.pvalue > 1e-3, (counts, probs, result)


@pytest.mark.parametrize("variant", ["llama_gqa", "qwen3", "mistral_sliding_window"])
def test_greedy_is_token_identical_to_transformers_generate(variant, hf_model_dir):
    path, torch_model = hf_model_dir(variant)
    model = load_pretrained(path)
    new = 8
    references = []
    for prompt in PROMPTS:
        with torch.no_grad():
            out = torch_model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt),
                                       dtype=torch.long), do_sample=False, max_new_tokens=new,
                                       pad_token_id=0)
        references.append(out[0, len(prompt):].numpy())
    eos = int(references[0][3])  # a token the first prompt emits mid-way
    ours = generate(model, PROMPTS, num_samples=1, max_new_tokens=new, temperature=0.0, key=KEY,
                    eos_token_ids=[eos])
    for i, (prompt, reference) in enumerate(zip(PROMPTS, references)):
        hits = np.nonzero(reference == eos)[0]
        length = hits[0] + 1 if len(hits) else new
        np.testing.assert_array_equal(ours.tokens[i, 0, :length], reference[:length], err_msg=str(i))
        assert ours.lengths[i, 0] == length and ours.finished[i, 0] == bool(len(hits))
        assert np.all(ours.tokens[i, 0, length:] == 0) and np.all(ours.logprobs_raw[i, 0, length:] == 0)
    assert ours.finished[0, 0] and ours.lengths[0, 0] <= 4


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_first_token_frequencies_match_tempered_softmax(temperature):
    logits = np.array([1.0, 0.2, -0.5, 2.0, 0.0, -1.5])
    tokens, logprobs, raw = first_tokens(fixed_logits_model(logits), 4000, temperature=temperature)
    expected = np.exp(logits / temperature) / np.exp(logits / temperature).sum()
    assert_frequencies(tokens, expected)
    np.testing.assert_allclose(logprobs, np.log(expected[tokens]), atol=1e-5)
    np.testing.assert_allclose(raw, (logits - np.log(np.exp(logits).sum()))[tokens], atol=1e-5)


@pytest.mark.parametrize("top_p, kept", [(0.65, [0, 1]), (0.75, [0, 1, 2]), (0.3, [0])])
def test_top_p_keeps_the_smallest_set_reaching_p_including_the_crossing_token(top_p, kept):
    probs = np.array([0.4, 0.3, 0.2, 0.1])
    tokens, logprobs, raw = first_tokens(fixed_logits_model(np.log(probs)), 3000, top_p=top_p)
    truncated = np.where(np.isin(np.arange(4), kept), probs, 0.0)
    assert set(np.unique(tokens)) == set(kept)
    assert_frequencies(tokens, truncated)
    np.testing.assert_allclose(logprobs, np.log(probs[tokens] / truncated.sum()), atol=1e-5)
    np.testing.assert_allclose(raw, np.log(probs[tokens]), atol=1e-5)


def test_top_k_keeps_k_and_reports_truncated_logprobs():
    probs = np.array([0.1, 0.35, 0.05, 0.3, 0.2])
    tokens, logprobs, _ = first_tokens(fixed_logits_model(np.log(probs)), 3000, top_k=2)
    assert set(np.unique(tokens)) == {1, 3}
    np.testing.assert_allclose(logprobs, np.log(probs[tokens] / 0.65), atol=1e-5)
    both, _, _ = first_tokens(fixed_logits_model(np.log(probs)), 2000, top_k=3, top_p=0.5)
    assert set(np.unique(both)) == {1, 3}  # top-3 renormalised: 0.35/0.85 < 0.5, so 2 tokens


def test_mixture_reproduces_policy_reference_and_geometric_mean():
    policy_logits = np.array([2.0, 0.5, -1.0, 0.0])
    reference_logits = np.array([-1.0, 1.0, 1.5, 0.2])
    policy, reference = fixed_logits_model(policy_logits), fixed_logits_model(reference_logits)
    log_pi = policy_logits - np.log(np.exp(policy_logits).sum())
    log_mu = reference_logits - np.log(np.exp(reference_logits).sum())
    for beta, target in [(0.0, log_pi), (1.0, log_mu), (0.5, 0.5 * log_pi + 0.5 * log_mu)]:
        target = target - np.log(np.exp(target).sum())
        out = mixture_generate(policy, reference, beta, [[0]], num_samples=3000, max_new_tokens=1,
                               key=jax.random.PRNGKey(3))
        tokens = out.tokens[0, :, 0]
        np.testing.assert_allclose(out.logprobs_mixture[0, :, 0], target[tokens], atol=1e-5)
        np.testing.assert_allclose(out.logprobs[0, :, 0], target[tokens], atol=1e-5)  # T = 1, no cut
        np.testing.assert_allclose(out.logprobs_policy[0, :, 0], log_pi[tokens], atol=1e-5)
        np.testing.assert_allclose(out.logprobs_reference[0, :, 0], log_mu[tokens], atol=1e-5)
        assert_frequencies(tokens, np.exp(target))


def test_mixture_of_two_real_models_decodes_in_lock_step(hf_model_dir):
    policy = load_pretrained(hf_model_dir("llama_gqa")[0])
    reference = load_pretrained(hf_model_dir("llama_biases")[0])
    out = mixture_generate(policy, reference, 0.25, PROMPTS, num_samples=2, max_new_tokens=6,
                           key=KEY, temperature=0.0)
    # Greedy on the mixture = argmax of (1 − β) log π + β log μ at every step, under full forwards
    # without a cache (left-padded to one width, so each model compiles once).
    forward = nnx.jit(lambda m, t, s: jax.nn.log_softmax(m(t, segment_ids=s)[0][0, -1]))
    for i, prompt in enumerate(PROMPTS):
        seq = list(prompt)
        for t in range(6):
            tokens, segments = (jnp.asarray(x) for x in left_pad([seq], 24, 0))
            lp = [forward(m, tokens, segments) for m in (policy, reference)]
            token = int(jnp.argmax(0.75 * lp[0] + 0.25 * lp[1]))
            assert out.tokens[i, 0, t] == token, (i, t)
            assert abs(out.logprobs_policy[i, 0, t] - float(lp[0][token])) < 1e-4
            seq.append(token)


def test_raw_logprobs_equal_the_training_forward_pass(hf_model_dir):
    model = load_pretrained(hf_model_dir("qwen3")[0])
    s = generate(model, PROMPTS, num_samples=3, max_new_tokens=7, temperature=0.8, top_p=0.9,
                 key=KEY, eos_token_ids=[5])
    rows, masks = [], []
    for b, prompt in enumerate(PROMPTS):
        for k in range(3):
            n = s.lengths[b, k]
            rows.append(list(prompt) + list(s.tokens[b, k, :n]))
            masks.append([False] * len(prompt) + [True] * n)
    width = max(map(len, rows))
    tokens, segments = left_pad(rows, width, 0)
    mask = np.zeros_like(tokens, bool)
    for i, m in enumerate(masks):
        mask[i, width - len(m):] = m
    logits, _ = model(jnp.asarray(tokens[:, :-1]), segment_ids=jnp.asarray(segments[:, :-1]))
    training = np.asarray(sequence_logprobs(logits, jnp.asarray(tokens[:, 1:]), jnp.asarray(mask[:, 1:])))
    diff = np.max(np.abs(training - s.logprobs_raw.sum(-1).reshape(-1)))
    print(f"sampler vs training forward: max |Σ logprobs_raw − sequence_logprobs| = {diff:.2e}")
    assert diff <= 1e-4, diff


def test_same_key_same_samples_on_one_device_and_on_meshes(hf_model_dir):
    path = hf_model_dir("qwen2")[0]
    args = dict(num_samples=3, max_new_tokens=6, temperature=1.0, top_k=20, key=KEY)
    single = generate(load_pretrained(path), PROMPTS, **args)
    again = generate(load_pretrained(path), PROMPTS, **args)
    np.testing.assert_array_equal(single.tokens, again.tokens)
    other = generate(load_pretrained(path), PROMPTS, **{**args, "key": jax.random.PRNGKey(1)})
    assert not np.array_equal(single.tokens, other.tokens)
    for shape in [(8, 1, 1), (2, 2, 2)]:
        mesh = parallel.make_mesh(*shape)
        sharded = generate(load_pretrained(path, mesh=mesh), PROMPTS, mesh=mesh, **args)
        np.testing.assert_array_equal(sharded.tokens, single.tokens, err_msg=str(shape))
        np.testing.assert_allclose(sharded.logprobs, single.logprobs, atol=1e-5)


def test_the_kv_cache_is_split_across_the_mesh_not_copied_to_every_device(monkeypatch):
    """Each device holds its rows' share of the cache: compiled for 64 prompts × 4 samples with
    SmolLM2's head layout (9 heads, 3 KV heads), the sampler's scratch memory a device on 8 devices is
    under a quarter of one device's (5.2 against 37.8 MiB). Before the rows were constrained XLA kept
    the whole cache on every device: 20.2 MiB."""
    config = LlamaConfig(vocab_size=512, hidden_size=144, intermediate_size=64, num_layers=4, num_heads=9,
                         num_kv_heads=3, head_dim=16, tie_word_embeddings=True)  # SmolLM2's head layout
    prompts = [[1 + i % 50] * 60 for i in range(64)]
    temp = {}
    real = sampling._decode_jit

    def measured(*args, **kwargs):
        compiled = real.lower(*args, **kwargs).compile()
        temp[len(args[2].sharding.device_set)] = compiled.memory_analysis().temp_size_in_bytes
        return real(*args, **kwargs)

    monkeypatch.setattr(sampling, "_decode_jit", measured)
    for shape in [(1, 1, 1), (1, 8, 1)]:
        mesh = parallel.make_mesh(*shape, devices=jax.devices()[:shape[1]])
        model = Llama(config, rngs=nnx.Rngs(0))
        state = nnx.state(model)
        nnx.update(model, jax.device_put(state, parallel.state_shardings(state, mesh)))
        generate(model, prompts, num_samples=4, max_new_tokens=4, key=KEY, mesh=mesh)
    print(f"sampler scratch a device: 1 device {temp[1] / 2**20:.1f} MiB, "
          f"8 devices {temp[8] / 2**20:.1f} MiB")
    assert temp[8] < temp[1] / 4, temp


def test_a_model_loaded_with_remat_samples_like_one_without(hf_model_dir):
    """remat is for the backward pass; decoding runs the layers plainly (remat inside the decode loop
    once failed with a TraceContextError)."""
    path = hf_model_dir("llama_gqa")[0]
    args = dict(num_samples=2, max_new_tokens=5, temperature=1.0, key=KEY)
    plain = generate(load_pretrained(path), PROMPTS, **args)
    rematted = generate(load_pretrained(path, remat=True), PROMPTS, **args)
    np.testing.assert_array_equal(rematted.tokens, plain.tokens)
    np.testing.assert_allclose(rematted.logprobs_raw, plain.logprobs_raw, atol=1e-6)


def test_prompts_within_a_bucket_and_new_sampling_settings_do_not_recompile(hf_model_dir):
    model = load_pretrained(hf_model_dir("llama_gqa")[0])
    args = dict(num_samples=2, max_new_tokens=3, key=KEY)
    generate(model, [[1, 2, 3], [4, 5]], **args)
    compiled = sampling._decode_jit._cache_size()
    generate(model, [[1, 2, 3, 4, 5, 6, 7], [9]], **args)  # same bucket: length 8, batch 2
    generate(model, [[1, 2, 3, 4]], temperature=0.3, top_p=0.5, top_k=4, **args)  # batch 1 → 1
    assert sampling._decode_jit._cache_size() == compiled + 1  # only the new batch bucket
    generate(model, [[1] * 12, [2]], **args)  # a longer prompt bucket compiles once more
    assert sampling._decode_jit._cache_size() == compiled + 2


def test_new_params_reach_the_sampler_without_resplitting_or_recompiling(hf_model_dir, monkeypatch):
    """Online recipes sample every step with updated parameters: passing them as `params=` uses the
    module split once, compiles nothing new, and samples from the new parameters."""
    model = load_pretrained(hf_model_dir("qwen3")[0])
    args = dict(num_samples=2, max_new_tokens=4, temperature=0.0, key=KEY)
    before = generate(model, PROMPTS, **args)
    compiled = sampling._decode_jit._cache_size()
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    noise = iter(jax.random.split(jax.random.PRNGKey(3), len(jax.tree.leaves(params))))
    new_params = jax.tree.map(lambda a: a + 0.05 * jax.random.normal(next(noise), a.shape), params)
    splits = []
    real_split = nnx.split
    monkeypatch.setattr(nnx, "split", lambda *a, **k: splits.append(a) or real_split(*a, **k))
    after = generate(model, PROMPTS, params=new_params, **args)
    assert splits == [], f"the module was split {len(splits)} times"
    assert sampling._decode_jit._cache_size() == compiled, "new parameters recompiled the sampler"
    monkeypatch.undo()
    expected = generate(nnx.merge(graphdef, new_params, rest), PROMPTS, **args)
    np.testing.assert_array_equal(after.tokens, expected.tokens)
    np.testing.assert_allclose(after.logprobs_raw, expected.logprobs_raw, atol=1e-6)
    assert np.max(np.abs(after.logprobs_raw - before.logprobs_raw)) > 1e-3, "old parameters used"


def test_text_helper_applies_the_chat_template_and_decodes(tmp_path):
    tokenizer = write_tokenizer(tmp_path)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_layers=1,
                         num_heads=2, num_kv_heads=1, head_dim=8)
    model = Llama(config, rngs=nnx.Rngs(0))
    responses, samples = generate_text(model, tokenizer, ["hello world", "the lazy dog"],
                                       num_samples=2, max_new_tokens=5, key=KEY, temperature=0.0)
    assert len(responses) == 2 and all(len(r) == 2 for r in responses)
    expected = tokenizer.decode(samples.tokens[1, 0, :samples.lengths[1, 0]], skip_special_tokens=True)
    assert responses[1][0] == expected and responses[1][0] == responses[1][1]  # greedy: K equal
    prompt_ids = tokenizer("<|user|> hello world\n<|assistant|> ", add_special_tokens=False)["input_ids"]
    direct = generate(model, [prompt_ids], num_samples=1, max_new_tokens=5, key=KEY, temperature=0.0,
                      eos_token_ids=[tokenizer.eos_token_id], pad_id=tokenizer.pad_token_id)
    np.testing.assert_array_equal(direct.tokens[0, 0], samples.tokens[0, 0])


def test_generation_configs_end_of_turn_ends_a_response_as_in_transformers(tmp_path):
    """An instruct model's generation_config.json may end its turn with a token that is not the
    tokenizer's EOS (Gemma's <end_of_turn>): sampling stops there too, as generate and vLLM do."""
    write_tokenizer(tmp_path)
    tokenizer = load_tokenizer(tmp_path)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_layers=1,
                         num_heads=2, num_kv_heads=1, head_dim=8)
    model = Llama(config, rngs=nnx.Rngs(0))
    args = dict(num_samples=1, max_new_tokens=5, key=KEY, temperature=0.0)
    _, free = generate_text(model, tokenizer, ["hello world"], **args)
    first = int(free.tokens[0, 0, 0])
    assert free.lengths[0, 0] > 1 and first != tokenizer.eos_token_id
    (tmp_path / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [tokenizer.eos_token_id, first]}))
    tokenizer = load_tokenizer(tmp_path)
    assert sampling.eos_ids_of(tokenizer) == sorted({tokenizer.eos_token_id, first})
    _, stopped = generate_text(model, tokenizer, ["hello world"], **args)
    assert stopped.lengths[0, 0] == 1 and stopped.tokens[0, 0, 0] == first


def test_bad_requests_get_clear_errors():
    model = fixed_logits_model([0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="prompt 1 must be a non-empty list of token ids"):
        generate(model, [[1], []], num_samples=1, max_new_tokens=1, key=KEY)
    with pytest.raises(ValueError, match=r"prompt 0 has token id 7 outside the vocabulary \[0, 3\)"):
        generate(model, [[1, 7]], num_samples=1, max_new_tokens=1, key=KEY)
    with pytest.raises(ValueError, match="0 < top_p ≤ 1"):
        generate(model, [[1]], num_samples=1, max_new_tokens=1, key=KEY, top_p=0.0)
    with pytest.raises(ValueError, match=r"beta=1.5; expected \[0, 1\]"):
        mixture_generate(model, model, 1.5, [[1]], max_new_tokens=1, key=KEY)
    other = fixed_logits_model([0.0, 1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="must share a tokenizer; their vocabularies differ"):
        mixture_generate(model, other, 0.5, [[1]], max_new_tokens=1, key=KEY)
    with pytest.raises(ValueError, match="prompt length 20 exceeds the largest bucket 16"):
        generate(model, [[1] * 20], num_samples=1, max_new_tokens=1, key=KEY, prompt_buckets=[8, 16])


def sorted_reference_support(logp, temperature, top_p, top_k):
    """The kept set by the textbook sort-based definition (numpy, float64)."""
    scaled = np.asarray(logp, np.float64) / temperature
    order = np.argsort(-scaled, kind="stable")
    k = top_k if 0 < top_k < len(scaled) else len(scaled)
    top = order[:k]
    probs = np.exp(scaled[top] - scaled[top].max())
    probs /= probs.sum()
    mass_before = np.cumsum(probs) - probs
    kept = top[(mass_before < top_p) | (top_p >= 1.0)]
    return set(kept.tolist())


@pytest.mark.parametrize("seed", range(20))
def test_truncation_by_bisection_matches_the_sort_based_definition(seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 3, 50)
    temperature = float(rng.uniform(0.3, 1.5))
    top_p = float(rng.choice([1.0, rng.uniform(0.05, 0.99)]))
    top_k = int(rng.choice([0, rng.integers(1, 50)]))
    logp = jax.nn.log_softmax(jnp.asarray(logits, jnp.float32))
    dist = np.asarray(sampling.sampling_distribution(logp[None], temperature, top_p, top_k))[0]
    ours = set(np.nonzero(np.isfinite(dist))[0].tolist())
    assert ours == sorted_reference_support(np.asarray(logp), temperature, top_p, top_k)
    np.testing.assert_allclose(np.exp(dist).sum(), 1.0, rtol=1e-5)
