"""Scanned layers: the stacked decoder run by lax.scan equals the same stack run layer by layer
(logits, gradients, cache decoding), per-layer windows that differ, remat policies, and a compiled
program whose size does not grow with depth."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import transformers
from flax import nnx

from nash_jax.models import KVCache, LlamaConfig, load_pretrained
from nash_jax.models.llama import Llama, positions_from_segments
from tests.tiny_hf import COMMON, torch_logits

TOKENS = np.random.default_rng(5).integers(0, 101, (3, 10))
SEGMENTS = np.array([[0] * 3 + [1] * 7, [1] * 10, [1] * 4 + [2] * 6], np.int32)  # left pad, full, packed


def tiny_config(**overrides):
    base = dict(vocab_size=101, hidden_size=32, intermediate_size=48, num_layers=3, num_heads=4,
                num_kv_heads=2, head_dim=8, qk_norm=True, sliding_windows=(None, 3, 3))
    return LlamaConfig(**{**base, **overrides})


def both_layouts(config):
    """The same random parameters run scanned and unrolled."""
    scanned = Llama(dataclasses.replace(config, scan_layers=True), rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(Llama(dataclasses.replace(config, scan_layers=False),
                                      rngs=nnx.Rngs(1)))
    unrolled = nnx.merge(graphdef, nnx.state(scanned))
    return scanned, unrolled


def loss_and_grads(model):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss(p):
        logits, _ = nnx.merge(graphdef, p, rest)(jnp.asarray(TOKENS), segment_ids=jnp.asarray(SEGMENTS))
        return jnp.sum(jnp.where(SEGMENTS[..., None] > 0, jax.nn.log_softmax(logits), 0)[..., :7])

    return jax.jit(jax.value_and_grad(loss))(params)


@pytest.mark.parametrize("attention", ["reference", "xla"])
def test_scanned_equals_unrolled_logits_and_gradients(attention):
    scanned, unrolled = both_layouts(tiny_config(attention=attention))
    (loss_s, grads_s), (loss_u, grads_u) = loss_and_grads(scanned), loss_and_grads(unrolled)
    assert abs(float(loss_s) - float(loss_u)) <= 1e-4 * abs(float(loss_u)), (loss_s, loss_u)
    worst = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(grads_s),
                                                                  jax.tree.leaves(grads_u)))
    print(f"{attention}: max |grad scanned - grad unrolled| = {worst:.2e}")
    assert worst <= 1e-5, worst
    assert float(jnp.max(jnp.abs(grads_s["layers"]["attn"]["q_proj"][...][2]))) > 0, \
        "the last layer must get a gradient"


def test_mixed_windows_choose_each_layers_window():
    """Changing the window of layer 1 changes the result; the scan must not use one window for all."""
    config = tiny_config(sliding_windows=(None, 2, None))
    scanned, unrolled = both_layouts(config)
    full, _ = Llama(dataclasses.replace(config, sliding_windows=()), rngs=nnx.Rngs(0))(
        jnp.asarray(TOKENS))
    mixed, _ = scanned(jnp.asarray(TOKENS))
    loop, _ = unrolled(jnp.asarray(TOKENS))
    assert float(jnp.max(jnp.abs(mixed - loop))) <= 1e-5
    assert float(jnp.max(jnp.abs(mixed - full))) > 1e-3, "the window of layer 1 was ignored"


def test_qwen2_with_sliding_layers_matches_transformers(tmp_path):
    """max_window_layers=1: layer 0 attends fully, layers 1 and 2 through a window of 3."""
    import torch

    config = transformers.Qwen2Config(**{**COMMON, "num_hidden_layers": 3}, use_sliding_window=True,
                                      sliding_window=3, max_window_layers=1)
    torch.manual_seed(0)
    torch_model = transformers.Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in torch_model.named_parameters():
            p.copy_((1.0 if name.endswith("norm.weight") else 0.0) + 0.08 * torch.randn_like(p))
    torch_model.save_pretrained(tmp_path)
    model = load_pretrained(tmp_path)
    assert model.config.sliding_windows == (None, 3, 3)
    tokens = TOKENS[:2]
    ours, _ = model(jnp.asarray(tokens))
    diff = float(np.max(np.abs(np.asarray(ours) - torch_logits(torch_model, tokens))))
    print(f"qwen2 mixed windows: max |logits_jax - logits_torch| = {diff:.2e}")
    assert diff <= 1e-4, diff


def test_scanned_cache_decoding_equals_unrolled_and_full_forward():
    scanned, unrolled = both_layouts(tiny_config())
    tokens, segments = jnp.asarray(TOKENS[:2]), jnp.asarray(SEGMENTS[:2])
    full, _ = scanned(tokens, segment_ids=segments)
    positions = positions_from_segments(segments)
    results = []
    for model in (scanned, unrolled):
        step = jax.jit(lambda t, p, s, c, model=model: model(t, p, s, cache=c))
        cache = KVCache.create(model.config, batch=2, length=12)
        pieces = []
        for start, stop in ((0, 6), (6, 7), (7, 8), (8, 9), (9, 10)):
            out, cache = step(tokens[:, start:stop], positions[:, start:stop], segments[:, start:stop],
                              cache)
            pieces.append(np.asarray(out))
        results.append(np.concatenate(pieces, axis=1))
    real = np.asarray(segments) > 0
    assert np.max(np.abs(results[0] - results[1])[real]) <= 1e-5
    diff = float(np.max(np.abs(results[0] - np.asarray(full))[real]))
    assert diff <= 1e-4, diff


@pytest.mark.parametrize("policy", ["full", "dots", "dots_with_no_batch_dims"])
def test_remat_policies_give_the_same_gradients(policy):
    plain, _ = both_layouts(tiny_config())
    rematted = nnx.merge(nnx.graphdef(Llama(tiny_config(remat=policy), rngs=nnx.Rngs(1))),
                         nnx.state(plain))
    (loss_a, grads_a), (loss_b, grads_b) = loss_and_grads(plain), loss_and_grads(rematted)
    assert float(loss_a) == pytest.approx(float(loss_b), rel=1e-6)
    for a, b in zip(jax.tree.leaves(grads_a), jax.tree.leaves(grads_b)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-6)


def test_remat_flag_reads_old_booleans_and_refuses_unknown_policies():
    assert tiny_config(remat=True).remat == "full" and tiny_config(remat=False).remat == "none"
    with pytest.raises(ValueError, match=r"remat='some'; expected one of \['dots', "):
        tiny_config(remat="some")
    with pytest.raises(ValueError, match="attention implementation 'fast' is not one of"):
        tiny_config(attention="fast")


def test_scanned_program_does_not_grow_with_depth():
    """The traced forward+backward of 2 and 8 scanned layers has the same number of operations;
    unrolled, it grows with the layers."""
    def size(layers, scan):
        model = Llama(tiny_config(num_layers=layers, sliding_windows=(), scan_layers=scan),
                      rngs=nnx.Rngs(0))
        graphdef, params = nnx.split(model)
        fn = jax.grad(lambda p: jnp.sum(nnx.merge(graphdef, p)(jnp.asarray(TOKENS))[0]))
        return len(str(jax.make_jaxpr(fn)(params)).splitlines())

    assert size(2, True) == size(8, True)
    assert size(8, False) > 3 * size(2, False) // 2
