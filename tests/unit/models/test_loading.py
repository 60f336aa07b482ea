"""The generic checkpoint loader: stacked and per-layer rules, prefixes, ignored keys, one error
naming every problem, and export back to the same keys."""

import numpy as np
import pytest
from flax import nnx

from nash_jax import parallel
from nash_jax.models import loading
from nash_jax.models.params import param


class Toy(nnx.Module):
    """Stacked kernels w [L=3, in 4, out 2], per-layer biases b0, b1, a plain scale."""

    def __init__(self, rngs):
        self.w = param(rngs, (3, 4, 2), ("layers", "embed", "mlp"), "float32")
        self.b0 = param(rngs, (2,), ("mlp",), "float32")
        self.b1 = param(rngs, (2,), ("mlp",), "float32")
        self.scale = param(rngs, (4,), ("embed",), "float32")


KEY_MAP = loading.KeyMap([
    loading.Rule("blocks.{layer}.dense.weight", "w", loading.TRANSPOSE),  # stacked slot
    loading.Rule("blocks.{layer}.dense.bias", "b{layer}"),  # one parameter per layer
    loading.Rule("norm.{kind}", "{kind}"),
], placeholders={"kind": "scale"}, ignored=r".*position_ids")


def checkpoint(prefix="encoder."):
    rng = np.random.default_rng(0)
    tensors = {f"{prefix}blocks.{i}.dense.weight": rng.normal(size=(2, 4)).astype(np.float32)
               for i in range(3)}
    tensors.update({f"{prefix}blocks.{i}.dense.bias": rng.normal(size=2).astype(np.float32)
                    for i in range(2)})
    tensors[f"{prefix}norm.scale"] = rng.normal(size=4).astype(np.float32)
    tensors[f"{prefix}embeddings.position_ids"] = np.arange(5)
    tensors["head.weight"] = np.zeros(1)  # another part of the model: left to the caller
    return tensors


def load(tensors, mesh=None):
    graphdef, state = nnx.split(nnx.eval_shape(lambda: Toy(nnx.Rngs(0))))
    loading.load_into(state, KEY_MAP, loading.ArraySource(tensors), prefix="encoder.", mesh=mesh,
                      what="toy checkpoint does not match")
    return nnx.merge(graphdef, state)


def test_layers_fill_their_slots_and_export_gives_the_same_tensors():
    tensors = checkpoint()
    model = load(tensors, mesh=parallel.make_mesh(1, 4, 2))
    for i in range(3):
        np.testing.assert_array_equal(np.asarray(model.w[...][i]),
                                      tensors[f"encoder.blocks.{i}.dense.weight"].T)
    np.testing.assert_array_equal(np.asarray(model.b1[...]), tensors["encoder.blocks.1.dense.bias"])
    assert model.w[...].sharding.spec == parallel.logical_to_spec(
        ("layers", "embed", "mlp"), (3, 4, 2), parallel.make_mesh(1, 4, 2))
    exported = loading.checkpoint_tensors(nnx.state(model), KEY_MAP, prefix="encoder.")
    expected = {k: v for k, v in tensors.items() if k.startswith("encoder.") and "position" not in k}
    assert sorted(exported) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(exported[key], value, err_msg=key)


def test_every_problem_is_named_in_one_error():
    tensors = checkpoint()
    del tensors["encoder.blocks.2.dense.weight"]
    tensors["encoder.blocks.0.dense.weight"] = np.zeros((4, 2), np.float32)
    tensors["encoder.blocks.3.dense.weight"] = np.zeros((2, 4), np.float32)  # a layer too many
    tensors["encoder.pooler.weight"] = np.zeros(3, np.float32)
    with pytest.raises(ValueError) as info:
        load(tensors)
    message = str(info.value)
    assert message.startswith("toy checkpoint does not match (4 problems):"), message
    assert "tensor 'encoder.blocks.0.dense.weight' has shape [4, 2]; expected [2, 4]" in message
    assert "unexpected tensor 'encoder.blocks.3.dense.weight'" in message
    assert "unexpected tensor 'encoder.pooler.weight'" in message
    assert "missing tensor 'encoder.blocks.2.dense.weight' (for layer 2 of parameter w)" in message
