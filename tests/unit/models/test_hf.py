"""Hugging Face directories in and out: round trips through transformers, sharded checkpoints,
loading onto meshes, and clear errors for broken directories."""

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import transformers
from jax.sharding import PartitionSpec as P
from safetensors.numpy import load_file, save_file

from nash_jax import parallel
from nash_jax.models import chat_prompt, load_pretrained, load_tokenizer, save_pretrained
from tests.tiny_hf import torch_logits, write_tokenizer

TOKENS = np.random.default_rng(7).integers(0, 101, (2, 10))


def max_diff(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


@pytest.mark.parametrize("variant", ["llama_biases", "qwen3_tied", "llama3_rope_scaling"])
def test_save_then_transformers_loads_the_same_logits(variant, hf_model_dir, tmp_path):
    path, torch_model = hf_model_dir(variant)
    model = load_pretrained(path)
    out = save_pretrained(model, tmp_path / "export")
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    diff = max_diff(torch_logits(reloaded, TOKENS), torch_logits(torch_model, TOKENS))
    print(f"{variant}: exported vs original logits {diff:.2e}")
    assert diff <= 1e-5, diff
    ours, _ = load_pretrained(out)(jnp.asarray(TOKENS))
    assert max_diff(ours, torch_logits(torch_model, TOKENS)) <= 1e-4


def test_sharded_checkpoints_round_trip(hf_model_dir, tmp_path):
    path, torch_model = hf_model_dir("qwen2")
    model = load_pretrained(path)
    out = save_pretrained(model, tmp_path / "sharded", max_shard_bytes=20_000)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = set(index["weight_map"].values())
    assert len(files) > 2 and all((out / f).is_file() for f in files)
    assert not (out / "model.safetensors").exists()
    ours, _ = load_pretrained(out)(jnp.asarray(TOKENS))
    assert max_diff(ours, torch_logits(torch_model, TOKENS)) <= 1e-4
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert max_diff(torch_logits(reloaded, TOKENS), torch_logits(torch_model, TOKENS)) <= 1e-5
    # transformers' own sharded format loads too.
    torch_model.save_pretrained(tmp_path / "hf_sharded", max_shard_size="20KB")
    assert (tmp_path / "hf_sharded" / "model.safetensors.index.json").is_file()
    theirs, _ = load_pretrained(tmp_path / "hf_sharded")(jnp.asarray(TOKENS))
    assert max_diff(theirs, ours) <= 1e-6


@pytest.mark.parametrize("shape", [(1, 4, 2), (2, 2, 2), (1, 2, 4), (8, 1, 1)])
def test_mesh_loading_shards_by_the_rules_and_keeps_logits(shape, hf_model_dir):
    path, _ = hf_model_dir("qwen3")
    single, _ = load_pretrained(path)(jnp.asarray(TOKENS))
    mesh = parallel.make_mesh(*shape)
    model = load_pretrained(path, mesh=mesh)
    data, fsdp, tensor = shape
    q = model.layers.attn.q_proj[...]  # [layers 2, embed 32, heads 4, head_dim 8]
    k = model.layers.attn.k_proj[...]  # [layers 2, embed 32, kv_heads 2, head_dim 8]
    expect_axis = lambda size, name, dim: name if size > 1 and dim % size == 0 else None  # noqa: E731
    assert q.sharding.spec == P(None, expect_axis(fsdp, "fsdp", 32), expect_axis(tensor, "tensor", 4),
                                None)
    assert k.sharding.spec == P(None, expect_axis(fsdp, "fsdp", 32), expect_axis(tensor, "tensor", 2),
                                None)
    q_heads = 4 // tensor if 4 % tensor == 0 else 4
    assert q.addressable_shards[0].data.shape == (2, 32 // fsdp, q_heads, 8), "not actually split"
    batch = jax.device_put(jnp.asarray(np.tile(TOKENS, (4, 1))), parallel.batch_sharding(mesh, 2))
    logits, _ = jax.jit(lambda t: model(t))(batch)
    diff = max_diff(np.asarray(logits)[:2], single)
    print(f"mesh {shape}: max |sharded - single device| = {diff:.2e}")
    assert diff <= 1e-5, diff


def test_make_mesh_sizes_and_errors():
    assert parallel.make_mesh(1, -1, 2).shape == {"data": 1, "fsdp": 4, "tensor": 2}
    with pytest.raises(ValueError, match="needs 6 devices; 8 are available"):
        parallel.make_mesh(1, 3, 2)
    with pytest.raises(ValueError, match="at most one -1"):
        parallel.make_mesh(-1, -1, 1)


def test_tokenizer_and_chat_template_load_and_travel_with_the_model(hf_model_dir, tmp_path):
    path, _ = hf_model_dir("llama_gqa")
    model_dir = tmp_path / "with_tokenizer"
    shutil.copytree(path, model_dir)
    write_tokenizer(model_dir)
    tokenizer = load_tokenizer(model_dir)
    assert tokenizer.convert_ids_to_tokens(tokenizer("the lazy dog")["input_ids"]) == [
        "the", "lazy", "dog"]
    assert chat_prompt(tokenizer, "hello world") == "<|user|> hello world\n<|assistant|> "
    assert chat_prompt(tokenizer, "hi", system="be brief").startswith("<|system|> be brief\n")
    out = save_pretrained(load_pretrained(model_dir), tmp_path / "export")
    assert (out / "tokenizer.json").is_file()
    assert chat_prompt(load_tokenizer(out), "hello world") == "<|user|> hello world\n<|assistant|> "


def test_chat_prompt_without_template_is_the_raw_prompt(tmp_path):
    tokenizer = write_tokenizer(tmp_path)
    tokenizer.chat_template = None
    assert chat_prompt(tokenizer, "the quick fox") == "the quick fox"


def test_missing_directory_and_config_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="model directory .* does not exist"):
        load_pretrained(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        load_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="tokenizer directory .* does not exist"):
        load_tokenizer(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="has no tokenizer files"):
        load_tokenizer(tmp_path)


def test_unknown_architecture_lists_the_supported_ones(hf_model_dir, tmp_path):
    path, _ = hf_model_dir("llama_gqa")
    shutil.copytree(path, tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config.update(model_type="gpt2", architectures=["GPT2LMHeadModel"])
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"model_type='gpt2'.*supported model types: \['gemma2', "
                                         r"'gemma3_text', 'llama', 'mistral', 'qwen2', 'qwen3'\]"):
        load_pretrained(tmp_path / "m")


def test_every_missing_unexpected_and_misshaped_tensor_is_named_in_one_error(hf_model_dir, tmp_path):
    path, _ = hf_model_dir("llama_gqa")
    shutil.copytree(path, tmp_path / "m")
    weights = load_file(tmp_path / "m" / "model.safetensors")
    del weights["model.layers.1.mlp.up_proj.weight"]
    weights["model.layers.0.self_attn.k_proj.weight"] = np.zeros((8, 32), np.float32)
    weights["model.extra.weight"] = np.zeros(3, np.float32)
    save_file(weights, tmp_path / "m" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError) as info:
        load_pretrained(tmp_path / "m")
    message = str(info.value)
    assert "3 problems" in message, message
    assert "missing tensor 'model.layers.1.mlp.up_proj.weight'" in message
    assert "'model.layers.0.self_attn.k_proj.weight' in model.safetensors has shape [8, 32]; " \
           "expected [16, 32]" in message
    assert "unexpected tensor 'model.extra.weight'" in message


def test_corrupt_safetensors_header_and_missing_weights_are_clear_errors(hf_model_dir, tmp_path):
    path, _ = hf_model_dir("llama_gqa")
    shutil.copytree(path, tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:8] + b"{not json" + data[17:])
    with pytest.raises(ValueError, match="model.safetensors: cannot read safetensors header"):
        load_pretrained(tmp_path / "m")
    weights.unlink()
    (tmp_path / "m" / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"neither model.safetensors .*pytorch_model.bin"):
        load_pretrained(tmp_path / "m")


def test_bad_dtype_is_rejected(hf_model_dir):
    path, _ = hf_model_dir("llama_gqa")
    with pytest.raises(ValueError, match="dtype 'float64' is not one of"):
        load_pretrained(path, dtype="float64")
