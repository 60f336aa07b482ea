"""Tiny GGUF files written as llama.cpp's converter writes them, from tiny transformers models.

Names come from the gguf package's own table (`gguf.get_tensor_name_map`, what convert_hf_to_gguf.py
uses), the Q/K rows of a llama are permuted with llama.cpp's `permute`, Gemma's norms carry `+ 1`, and
2-D weights are quantised with `gguf.quants.quantize` (norms stay F32, as llama.cpp keeps them).
"""

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

# Types the gguf package can write (quantize) as well as read; the K-quants it only reads.
WRITABLE_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")
CONTROL, NORMAL = 3, 1
MERGES = ("t h", "h e", "\u0120 t")
CHAT_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"


def gguf_tensors(torch_model, arch):
    """{GGUF name: float32 numpy tensor} of a transformers model, as llama.cpp converts it."""
    config = torch_model.config
    arch_id = next(key for key, name in gguf.MODEL_ARCH_NAMES.items() if name == arch)
    names = gguf.get_tensor_name_map(arch_id, config.num_hidden_layers)
    tensors = {}
    for key, value in torch_model.state_dict().items():
        if key == "lm_head.weight" and config.tie_word_embeddings:
            continue
        base, suffix = key.rsplit(".", 1)
        value = value.float().numpy()
        if arch == "llama" and base.endswith("q_proj"):
            value = permute_rotary_rows(value, config.num_attention_heads)
        elif arch == "llama" and base.endswith("k_proj"):
            value = permute_rotary_rows(value, config.num_key_value_heads)
        if arch.startswith("gemma") and base.endswith("norm"):
            value = value + 1.0
        tensors[f"{names.get_name(base)}.{suffix}"] = value
    return tensors


def permute_rotary_rows(weights, heads):
    """llama.cpp's own `permute`, HF rows -> GGUF rows (the inverse of
    nash_jax.models.gguf.unpermute_rotary_rows), to write test files as llama.cpp writes them."""
    half = weights.shape[0] // heads // 2
    rows = weights.reshape(heads, 2, half, *weights.shape[1:])
    return rows.swapaxes(1, 2).reshape(weights.shape)


def quantised(value, type_name):
    """(data, raw_dtype) for GGUFWriter.add_tensor: 1-D tensors stay F32."""
    if value.ndim == 1 or type_name == "F32":
        return value.astype(np.float32), None
    if type_name == "F16":
        return value.astype(np.float16), None
    qtype = Q[type_name]
    return gguf.quants.quantize(value, qtype), qtype


def round_trip(value, type_name):
    """What a reader gets back from `value` written as `type_name` (float32)."""
    data, qtype = quantised(value, type_name)
    return np.asarray(gguf.quants.dequantize(data, qtype) if qtype is not None else data, np.float32)


def write_gguf(path, torch_model, arch, type_name="F32", *, tensors=None, extra_metadata=None,
               tokenizer=True, merges=MERGES):
    """A GGUF file of `torch_model` (or of `tensors`, GGUF name -> array) for architecture `arch`;
    without `tokenizer`, no tokenizer.* metadata; `merges` those of a byte-level BPE (llama)."""
    config = torch_model.config
    writer = gguf.GGUFWriter(path, arch)
    writer.add_uint32(f"{arch}.block_count", config.num_hidden_layers)
    writer.add_uint32(f"{arch}.context_length", config.max_position_embeddings)
    writer.add_uint32(f"{arch}.embedding_length", config.hidden_size)
    writer.add_uint32(f"{arch}.feed_forward_length", config.intermediate_size)
    writer.add_uint32(f"{arch}.attention.head_count", config.num_attention_heads)
    writer.add_uint32(f"{arch}.attention.head_count_kv", config.num_key_value_heads)
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", config.rms_norm_eps)
    writer.add_float32(f"{arch}.rope.freq_base", _global_rope_theta(config))
    writer.add_uint32(f"{arch}.attention.key_length", config.head_dim)
    writer.add_uint32(f"{arch}.rope.dimension_count", config.head_dim)
    if getattr(config, "sliding_window", None):
        writer.add_uint32(f"{arch}.attention.sliding_window", config.sliding_window)
    for key, value in (extra_metadata or {}).items():
        writer.add_key_value(key, value, *_value_type(value))
    if tokenizer:
        _add_tokenizer(writer, config.vocab_size, merges, sentencepiece=arch.startswith("gemma"))
    for name, value in (tensors if tensors is not None else gguf_tensors(torch_model, arch)).items():
        data, qtype = quantised(value, type_name)
        writer.add_tensor(name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _global_rope_theta(config):
    rope = config.rope_parameters
    return float((rope.get("full_attention") or rope)["rope_theta"])


def _value_type(value):
    if isinstance(value, str):
        return (gguf.GGUFValueType.STRING,)
    if isinstance(value, float):
        return (gguf.GGUFValueType.FLOAT32,)
    return (gguf.GGUFValueType.UINT32,)


def _add_tokenizer(writer, vocab_size, merges, *, sentencepiece):
    """A byte-level BPE (as SmolLM's) or a sentencepiece vocabulary (as Gemma's) of vocab_size tokens."""
    if sentencepiece:
        specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
        pieces = ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["\u2581t", "th", "he"]
    else:
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        pieces = ["\u0120"] + [chr(c) for c in range(33, 127)] + ["th", "he", "\u0120t"]
    pieces += [f"x{i}" for i in range(vocab_size - len(specials) - len(pieces))]
    tokens = (specials + pieces)[:vocab_size]
    writer.add_tokenizer_model("llama" if sentencepiece else "gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([CONTROL] * len(specials) + [NORMAL] * (len(tokens) - len(specials)))
    if sentencepiece:
        writer.add_token_scores([0.0] * len(specials) + [-float(i) for i in range(len(pieces))])
        writer.add_bos_token_id(2)
        writer.add_eos_token_id(1)
    else:
        writer.add_token_merges(list(merges))
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
        writer.add_chat_template(CHAT_TEMPLATE)
