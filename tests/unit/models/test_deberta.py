"""The DeBERTa-v2 encoder against transformers' PyTorch DebertaV2Model on tiny random configs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from nash_jax.models.deberta import (config_from_hf, deberta_from_tensors, log_bucket_positions,
                                     relative_position_index)


def torch_deberta(seed=0, **overrides):
    settings = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=512, relative_attention=True,
                    position_buckets=8, max_relative_positions=32, pos_att_type=["p2c", "c2p"],
                    share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False,
                    type_vocab_size=0, layer_norm_eps=1e-7, hidden_act="gelu")
    settings.update(overrides)
    config = transformers.DebertaV2Config(**settings)
    torch.manual_seed(seed)
    model = transformers.DebertaV2Model(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_((1.0 if name.endswith("LayerNorm.weight") else 0.0) + 0.1 * torch.randn_like(p))
    return model, config.to_dict()


def ours_from(model, hf_config):
    tensors = {k: v.numpy() for k, v in model.state_dict().items()}
    return deberta_from_tensors(config_from_hf(hf_config), tensors)


@pytest.mark.parametrize("overrides, length", [
    ({}, 40),  # sequences longer than the 2 × 8 position buckets: log buckets and clipping
    ({"position_buckets": 256, "max_relative_positions": 512}, 300),  # PairRM's table, L > 256
    ({"pos_att_type": ["c2p"]}, 20),
    ({"position_buckets": -1, "max_relative_positions": 16}, 24),  # no buckets: clipped positions
])
def test_hidden_states_match_transformers_at_real_tokens(overrides, length):
    model, hf_config = torch_deberta(**overrides)
    ours = ours_from(model, hf_config)
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 97, (3, length))
    mask = np.ones((3, length), np.int64)
    mask[1, length // 2:] = 0  # right padding, as PairRM pads
    mask[2, length - 3:] = 0
    ids[mask == 0] = 0
    with torch.no_grad():
        reference = model(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state
    got = np.asarray(ours(jnp.asarray(ids), jnp.asarray(mask)))
    real = mask == 1
    diff = float(np.max(np.abs(got[real] - reference.numpy()[real])))
    print(f"{overrides} L={length}: max |hidden_jax − hidden_torch| = {diff:.2e}")
    assert diff <= 1e-4, diff


def test_relative_position_table_pins_the_log_bucket_edges():
    rel = np.array([511, -511, 512, -512, 200, 1000, 2047, 128, -128, 0])
    np.testing.assert_array_equal(log_bucket_positions(rel, 256, 512),
                                  [255, -255, 256, -256, 169, 317, 383, 128, -128, 0])
    _, hf_config = torch_deberta(position_buckets=256, max_relative_positions=512)
    index = relative_position_index(600, config_from_hf(hf_config))
    assert index[511, 0] == 255 + 256 and index[0, 511] == -255 + 256 and index[0, 599] == 0


def test_checkpoint_mismatches_are_named_together():
    model, hf_config = torch_deberta()
    tensors = {k: v.numpy() for k, v in model.state_dict().items()}
    del tensors["encoder.layer.1.output.dense.bias"]
    tensors["encoder.layer.0.intermediate.dense.weight"] = np.zeros((8, 32), np.float32)
    tensors["pooler.dense.weight"] = np.zeros((32, 32), np.float32)
    with pytest.raises(ValueError) as info:
        deberta_from_tensors(config_from_hf(hf_config), tensors)
    message = str(info.value)
    assert "3 problems" in message
    assert ("missing tensor 'encoder.layer.1.output.dense.bias' (for layer 1 of parameter "
            "layers.output.bias)") in message
    assert "'encoder.layer.0.intermediate.dense.weight' has shape [8, 32]; expected [64, 32]" in message
    assert "unexpected tensor 'pooler.dense.weight'" in message


def test_unsupported_deberta_options_are_refused_by_name():
    _, hf_config = torch_deberta()
    with pytest.raises(ValueError, match=r"position_biased_input=True .*type_vocab_size=2"):
        config_from_hf({**hf_config, "position_biased_input": True, "type_vocab_size": 2})


@pytest.mark.parametrize("remat", [None, "full", "dots"])
def test_scanned_layers_equal_unrolled_layers_in_values_and_gradients(remat):
    """The stacked layers run by lax.scan (with or without remat) against the same parameters run
    layer by layer in a Python loop: hidden states and parameter gradients."""
    import dataclasses

    from flax import nnx

    model, hf_config = torch_deberta(num_hidden_layers=3)
    tensors = {k: v.numpy() for k, v in model.state_dict().items()}
    config = config_from_hf(hf_config)
    assert nnx.state(deberta_from_tensors(config, tensors)).layers.output.kernel[...].shape == (3, 64, 32)
    rng = np.random.default_rng(1)
    ids = jnp.asarray(rng.integers(1, 97, (2, 24)))
    mask = jnp.asarray(np.arange(24)[None, :] < np.array([[24], [17]]))

    def loss(net):
        hidden = net(ids, mask)
        return jnp.sum(jnp.where(mask[..., None], hidden, 0.0) ** 2)

    @nnx.jit
    def values_and_gradients(net):
        return net(ids, mask), nnx.grad(loss)(net)

    results = {}
    for scan in (True, False):
        net = deberta_from_tensors(dataclasses.replace(config, scan_layers=scan,
                                                       remat=remat if scan else None), tensors)
        results[scan] = values_and_gradients(net)
    (hidden_scan, grad_scan), (hidden_loop, grad_loop) = results[True], results[False]
    diff = float(jnp.max(jnp.abs(hidden_scan - hidden_loop)))
    grad_diff = max(float(jnp.max(jnp.abs(a - b)) / (jnp.max(jnp.abs(b)) + 1e-12))
                    for a, b in zip(jax.tree.leaves(grad_scan), jax.tree.leaves(grad_loop)))
    print(f"remat={remat}: max |scan − loop| hidden {diff:.2e}, gradient (relative) {grad_diff:.2e}")
    assert diff <= 1e-5 and grad_diff <= 1e-5, (diff, grad_diff)


def test_unknown_remat_policy_is_refused_by_name():
    _, hf_config = torch_deberta()
    with pytest.raises(ValueError, match=r"remat='sometimes'; expected one of"):
        config_from_hf(hf_config, remat="sometimes")


def test_scanned_program_does_not_grow_with_depth():
    """The lowered forward holds one layer body: 8 layers lower to the same program text as 2 (up to
    the layer count in the shapes), while the unrolled loop grows with depth."""
    from flax import nnx

    from nash_jax.models.deberta import Deberta

    _, hf_config = torch_deberta()

    def program_size(layers, scan):
        config = config_from_hf({**hf_config, "num_hidden_layers": layers}, scan_layers=scan)
        graphdef, state = nnx.split(nnx.eval_shape(lambda: Deberta(config, rngs=nnx.Rngs(0))))
        rows = jax.ShapeDtypeStruct((2, 32), jnp.int32)
        forward = jax.jit(lambda state, ids, mask: nnx.merge(graphdef, state)(ids, mask))
        return len(forward.lower(state, rows, rows).as_text())

    scanned = {n: program_size(n, True) for n in (2, 8)}
    unrolled = {n: program_size(n, False) for n in (2, 8)}
    print(f"lowered program characters: scanned {scanned}, unrolled {unrolled}")
    assert abs(scanned[8] - scanned[2]) <= 0.02 * scanned[2], scanned
    assert unrolled[8] > 2 * unrolled[2], unrolled
