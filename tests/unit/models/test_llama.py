"""The Flax decoder against transformers' PyTorch classes: logits, padding, cache, dtypes, remat."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nash_jax.models import KVCache, load_pretrained
from nash_jax.models.llama import positions_from_segments
from tests.tiny_hf import VARIANTS, torch_logits

TOL = 1e-4
LENGTHS = [9, 5, 7]  # three sequences, padded to 9


def ragged_tokens(seed=0, vocab=101):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, n) for n in LENGTHS]


def padded_batch(sequences, side, pad_id=0):
    width = max(map(len, sequences))
    tokens = np.full((len(sequences), width), pad_id)
    segments = np.zeros((len(sequences), width), np.int32)
    for row, seq in enumerate(sequences):
        cols = slice(width - len(seq), width) if side == "left" else slice(0, len(seq))
        tokens[row, cols], segments[row, cols] = seq, 1
    return tokens, segments


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_logits_match_transformers(variant, hf_model_dir):
    path, torch_model = hf_model_dir(variant)
    model = load_pretrained(path)
    tokens = np.random.default_rng(1).integers(0, 101, (2, 11))
    ours, _ = model(jnp.asarray(tokens))
    diff = float(np.max(np.abs(np.asarray(ours) - torch_logits(torch_model, tokens))))
    print(f"{variant}: max |logits_jax - logits_torch| = {diff:.2e}")
    assert diff <= TOL, f"{variant}: max abs logit difference {diff}"


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("variant", ["llama_gqa", "mistral_sliding_window", "qwen3"])
def test_padded_batch_matches_unpadded_transformers_runs(variant, side, hf_model_dir):
    path, torch_model = hf_model_dir(variant)
    model = load_pretrained(path)
    sequences = ragged_tokens()
    tokens, segments = padded_batch(sequences, side)
    logits, _ = jax.jit(lambda t, s: model(t, segment_ids=s))(jnp.asarray(tokens), jnp.asarray(segments))
    logits = np.asarray(logits)
    worst = 0.0
    for row, seq in enumerate(sequences):
        reference = torch_logits(torch_model, seq[None])[0]
        real = logits[row][segments[row] == 1]
        worst = max(worst, float(np.max(np.abs(real - reference))))
    print(f"{variant} {side}-padded: max |logits_jax - logits_torch| = {worst:.2e}")
    assert worst <= TOL, worst
    assert np.all(np.isfinite(logits)), "padding rows must stay finite"


@pytest.mark.parametrize("variant", ["llama_gqa", "mistral_sliding_window", "qwen2"])
def test_prefill_then_decode_with_cache_matches_full_forward(variant, hf_model_dir):
    path, _ = hf_model_dir(variant)
    model = load_pretrained(path)
    sequences = [s for s in ragged_tokens(2)]
    tokens, segments = padded_batch(sequences, "left")
    full, _ = model(jnp.asarray(tokens), segment_ids=jnp.asarray(segments))

    prompt_len = 6
    positions = positions_from_segments(jnp.asarray(segments))
    cache = KVCache.create(model.config, batch=3, length=16)
    step = jax.jit(lambda t, p, s, c: model(t, p, s, cache=c))
    prefill, cache = step(jnp.asarray(tokens[:, :prompt_len]), positions[:, :prompt_len],
                          jnp.asarray(segments[:, :prompt_len]), cache)
    pieces = [np.asarray(prefill)]
    for t in range(prompt_len, tokens.shape[1]):
        out, cache = step(jnp.asarray(tokens[:, t:t + 1]), positions[:, t:t + 1],
                          jnp.asarray(segments[:, t:t + 1]), cache)
        pieces.append(np.asarray(out))
    incremental = np.concatenate(pieces, axis=1)
    real = segments == 1
    diff = float(np.max(np.abs(incremental[real] - np.asarray(full)[real])))
    print(f"{variant}: prefill+decode vs full forward {diff:.2e}")
    assert diff <= TOL, diff
    assert int(cache.end) == tokens.shape[1]


def test_bfloat16_compute_stays_close_and_keeps_fp32_logits(hf_model_dir):
    path, torch_model = hf_model_dir("llama_gqa")
    model = load_pretrained(path, dtype="bfloat16")
    assert model.layers.attn.q_proj.get_value().dtype == jnp.bfloat16
    tokens = np.random.default_rng(3).integers(0, 101, (2, 8))
    logits, _ = model(jnp.asarray(tokens))
    assert logits.dtype == jnp.float32
    diff = float(np.max(np.abs(np.asarray(logits) - torch_logits(torch_model, tokens))))
    assert diff < 0.1, diff
    mixed = load_pretrained(path, dtype="bfloat16", param_dtype="float32")
    assert mixed.layers.attn.q_proj.get_value().dtype == jnp.float32


def test_remat_gives_the_same_gradients(hf_model_dir):
    path, _ = hf_model_dir("qwen3")
    tokens = jnp.asarray(np.random.default_rng(4).integers(0, 101, (2, 8)))

    def grads(model):
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)

        def loss(p):
            logits, _ = nnx.merge(graphdef, p, rest)(tokens)
            return jnp.mean(jax.nn.log_softmax(logits)[..., 0])

        return jax.jit(jax.grad(loss))(params)

    plain = grads(load_pretrained(path))
    remat = grads(load_pretrained(path, remat=True))
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(remat)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("variant", ["llama_gqa", "llama_biases"])
def test_mlp_weight_gradients_match_transformers(variant, hf_model_dir):
    """The MLP's hand-written backward (models/layers.linear): the gradients of a log-likelihood
    with respect to every layer's gate, up and down projections equal PyTorch's autograd."""
    import torch

    path, torch_model = hf_model_dir(variant)
    rng = np.random.default_rng(5)
    tokens, targets = rng.integers(0, 101, (2, 9)), rng.integers(0, 101, (2, 9))
    graphdef, params, rest = nnx.split(load_pretrained(path), nnx.Param, ...)

    def loss(p):
        logits, _ = nnx.merge(graphdef, p, rest)(jnp.asarray(tokens))
        return jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], -1))

    ours = jax.jit(jax.grad(loss))(params)["layers"]["mlp"]
    torch_model.zero_grad()
    logp = torch.log_softmax(torch_model(torch.as_tensor(tokens)).logits, -1)
    torch.gather(logp, 2, torch.as_tensor(targets)[..., None]).mean().backward()
    for name in ("gate_proj", "up_proj", "down_proj"):
        grad = np.asarray(ours[name][...])  # [layers, in, out]
        for layer, block in enumerate(torch_model.model.layers):
            reference = getattr(block.mlp, name).weight.grad.numpy().T
            diff = float(np.max(np.abs(grad[layer] - reference)))
            scale = float(np.max(np.abs(reference)))
            assert scale > 0 and diff <= TOL * scale, f"{name} layer {layer}: {diff} (max {scale})"


def test_cache_overflow_is_refused(hf_model_dir):
    path, _ = hf_model_dir("llama_gqa")
    model = load_pretrained(path)
    cache = KVCache.create(model.config, batch=1, length=4)
    _, cache = model(jnp.zeros((1, 3), jnp.int32), cache=cache)
    with pytest.raises(ValueError, match="KV cache holds 4 slots, 3 are filled; 2 more tokens"):
        model(jnp.zeros((1, 2), jnp.int32), cache=cache)
