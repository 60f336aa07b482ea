"""Parameter averages of iterates: of identical ones the iterate, of two the midpoint, readable by
transformers; mismatched architectures are refused."""

import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file

from nash_jax.evaluation.iterate_averaging import average_policies
from tests.tiny_hf import build_torch_model


@pytest.fixture(scope="module")
def two_iterates(tmp_path_factory):
    root = tmp_path_factory.mktemp("iterates")
    for seed in (0, 1):
        build_torch_model("llama_gqa", seed=seed).save_pretrained(root / f"pi_{seed}")
    return root


def tensors(path):
    return load_file(path / "model.safetensors")


def max_diff(a, b):
    assert sorted(a) == sorted(b)
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


def test_the_average_of_identical_iterates_is_that_iterate(two_iterates, tmp_path):
    out = average_policies([two_iterates / "pi_0"] * 3, tmp_path / "avg")
    diff = max_diff(tensors(out), tensors(two_iterates / "pi_0"))
    assert diff <= 2e-7, f"max |Δ| = {diff}"  # (3θ)/3 in fp32: one rounding at most


def test_the_average_of_two_is_their_midpoint_and_loads_in_transformers(two_iterates, tmp_path):
    a, b = tensors(two_iterates / "pi_0"), tensors(two_iterates / "pi_1")
    assert max_diff(a, b) > 0.01
    out = average_policies([two_iterates / "pi_0", two_iterates / "pi_1"], tmp_path / "avg")
    midpoint = {k: (a[k] + b[k]) / 2 for k in a}
    diff = max_diff(tensors(out), midpoint)
    assert diff <= 1e-6, f"max |Δ| = {diff}"
    loaded = transformers.AutoModelForCausalLM.from_pretrained(out)
    state = {k: v.detach().numpy() for k, v in loaded.state_dict().items()}
    diff = max(float(np.max(np.abs(state[k] - midpoint[k]))) for k in midpoint)
    assert diff <= 1e-6, f"transformers' copy differs from the midpoint by {diff}"
    with torch.no_grad():
        assert torch.isfinite(loaded(torch.tensor([[1, 2, 3]])).logits).all()


def test_mismatched_architectures_and_missing_directories_are_refused(two_iterates, tmp_path):
    build_torch_model("qwen2").save_pretrained(tmp_path / "qwen2")
    with pytest.raises(ValueError, match="does not have the architecture of .*model_type"):
        average_policies([two_iterates / "pi_0", tmp_path / "qwen2"], tmp_path / "avg")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        average_policies([two_iterates / "pi_0", tmp_path / "nowhere"], tmp_path / "avg")
    assert not (tmp_path / "avg").exists()
