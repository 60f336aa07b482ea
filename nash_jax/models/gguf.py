"""GGUF files (llama.cpp's format) -> Hugging Face directories, in numpy: no torch.

The `gguf` package reads the file and dequantises every tensor type it implements (F32, F16, BF16,
Q8_0, Q4_0/1, Q5_0/1, the K-quants, ...). What llama.cpp's converter did to the Hugging Face tensors
is undone here: the Q/K row permutation of the `llama` architecture (its rotary embedding pairs
neighbouring rows, Hugging Face's pairs the two halves of a head) and the `+ 1` that Gemma's norms
carry in GGUF (Hugging Face's Gemma norm computes `(1 + w)` itself). The metadata becomes a
config.json through transformers' own config class (so every default is the one transformers' GGUF
loader would apply; the metadata llama.cpp reads for sliding-window layers and the attention scale
included), the tokenizer comes from `gguf_tokenizer`, and OUT_DIR is written whole or not at all.

Before any tensor is dequantised, the metadata and the tokenizer are converted and every tensor's
name, type and shape is checked against the model of that config.json, as nash_jax's loader checks a
checkpoint (hf.checkpoint_problems). The tensors are then dequantised shard by shard while the
safetensors files are written: the host holds one shard (≤ max_shard_bytes), not the whole model.
"""

import dataclasses
import json
import math
import re
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from nash_jax.runs.files import check_output, write_dir_atomically
from nash_jax.models import gguf_tokenizer, hf

DTYPES = ("float32", "bfloat16")

_LAYER_NAMES = {  # GGUF `blk.N.<name>` -> HF `model.layers.N.<name>`, shared by every architecture
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_LLAMA_LAYER_NAMES = {**_LAYER_NAMES, "ffn_norm": "post_attention_layernorm"}
# Gemma's four norms per layer: llama.cpp calls the pre-feed-forward one `ffn_norm`.
_GEMMA_LAYER_NAMES = {**_LAYER_NAMES, "post_attention_norm": "post_attention_layernorm",
                      "ffn_norm": "pre_feedforward_layernorm",
                      "post_ffw_norm": "post_feedforward_layernorm"}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}

# Metadata `<arch>.<key>` -> config.json key (transformers' GGUF table, ggml.py, for these families).
_CONFIG_KEYS = {
    "context_length": "max_position_embeddings", "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size", "embedding_length": "hidden_size",
    "attention.head_count": "num_attention_heads", "attention.head_count_kv": "num_key_value_heads",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps", "rope.freq_base": "rope_theta",
    "attention.key_length": "head_dim", "attention.sliding_window": "sliding_window",
    "attn_logit_softcapping": "attn_logit_softcapping",
    "final_logit_softcapping": "final_logit_softcapping", "vocab_size": "vocab_size",
}
_REQUIRED = ("block_count", "embedding_length", "feed_forward_length", "attention.head_count")


@dataclasses.dataclass(frozen=True)
class Architecture:
    model_type: str  # config.json's model_type
    hf_class: str  # config.json's architectures
    layer_names: dict
    permuted_qk: bool = False  # llama.cpp permuted the Q/K rows for its rotary embedding
    norm_offset: float = 0.0  # llama.cpp added this to every norm weight
    config_keys: dict = dataclasses.field(default_factory=dict)  # beyond _CONFIG_KEYS


ARCHITECTURES = {  # GGUF general.architecture -> what it becomes
    "llama": Architecture("llama", "LlamaForCausalLM", _LLAMA_LAYER_NAMES, permuted_qk=True,
                          config_keys={"rope.dimension_count": "head_dim"}),
    "qwen2": Architecture("qwen2", "Qwen2ForCausalLM", _LLAMA_LAYER_NAMES),
    "qwen3": Architecture("qwen3", "Qwen3ForCausalLM", _LLAMA_LAYER_NAMES),
    "gemma2": Architecture("gemma2", "Gemma2ForCausalLM", _GEMMA_LAYER_NAMES, norm_offset=1.0),
    "gemma3": Architecture("gemma3_text", "Gemma3ForCausalLM", _GEMMA_LAYER_NAMES, norm_offset=1.0),
}


@dataclasses.dataclass(frozen=True)
class Imported:
    path: Path
    architecture: str
    parameters: int
    seconds: float

    def summary(self):
        return (f"{self.path}: {self.architecture} ({ARCHITECTURES[self.architecture].hf_class}), "
                f"{self.parameters:,} parameters, written in {self.seconds:.1f} s")


def import_gguf(file, out_dir, *, dtype="float32", overwrite=False, max_shard_bytes=None):
    """Write the Hugging Face directory of GGUF `file` to `out_dir` (new or empty; with `overwrite`,
    one nash_jax wrote before). The metadata, tokenizer and every tensor's name, type and shape are
    checked before any tensor is dequantised; tensors are then dequantised shard by shard as they
    are written."""
    start = time.perf_counter()
    file, out_dir = Path(file), Path(out_dir)
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {DTYPES}")
    check_output(out_dir, "OUT_DIR", overwrite=overwrite)
    reader = open_gguf(file)
    name = metadata(reader, "general.architecture", file)
    arch = architecture(name, file)
    tensors = HFTensors(reader, name, arch, file, dtype)
    config = hf_config(reader, name, arch, file, tied="lm_head.weight" not in tensors)
    config["dtype"] = dtype
    tokenizer = gguf_tokenizer.tokenizer_from_gguf(reader, name, file)
    check_tensors(config, tensors.shapes, file)

    def write(tmp):
        hf.write_safetensors(tmp, tensors, max_shard_bytes or hf.DEFAULT_MAX_SHARD_BYTES,
                             sizes=tensors.sizes)
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
        (tmp / "generation_config.json").write_text(
            json.dumps(generation_config(reader, config, file), indent=2))
        tokenizer.save_pretrained(tmp)

    write_dir_atomically(out_dir, write)
    parameters = sum(math.prod(shape) for shape in tensors.shapes.values())
    return Imported(out_dir, name, parameters, time.perf_counter() - start)


def check_tensors(config, shapes, file, shown=3):
    """One line naming the first `shown` tensors that nash_jax's loader would refuse under `config`
    (missing, unexpected, mis-shaped) and how many there are in all; nothing when it would load."""
    problems = hf.checkpoint_problems(config, shapes, source=f"{file}'s metadata")
    if problems:
        more = f"; and {len(problems) - shown} more" if len(problems) > shown else ""
        raise ValueError(f"{file}: its tensors do not match the {config['model_type']} model its "
                         f"metadata describes ({len(problems)} problems): "
                         f"{'; '.join(problems[:shown])}{more}")


def open_gguf(file):
    """A gguf.GGUFReader of `file`, every tensor's data present; one-line errors otherwise."""
    import gguf

    if not file.is_file():
        raise FileNotFoundError(f"GGUF file {file} does not exist")
    try:
        reader = gguf.GGUFReader(file)
    except (ValueError, KeyError, IndexError, TypeError, OverflowError) as err:
        raise ValueError(f"{file} is not a complete GGUF file (reading it: {err})") from None
    for tensor in reader.tensors:
        if tensor.data.nbytes != tensor.n_bytes:
            raise ValueError(f"{file} is not a complete GGUF file: tensor {tensor.name} has "
                             f"{tensor.data.nbytes} of its {tensor.n_bytes} bytes (truncated?)")
    return reader


def metadata(reader, key, file, default=KeyError):
    field = reader.fields.get(key)
    if field is None:
        if default is KeyError:
            raise ValueError(f"{file}: metadata {key} is missing; expected it in every GGUF model")
        return default
    return field.contents()


def architecture(name, file):
    if name not in ARCHITECTURES:
        raise ValueError(f"{file}: architecture {name!r} is not supported; supported: "
                         f"{sorted(ARCHITECTURES)}")
    return ARCHITECTURES[name]


def hf_config(reader, name, arch, file, *, tied):
    """config.json's dict: the mapped metadata, and transformers' defaults for the rest."""
    import transformers

    for key in _REQUIRED:
        metadata(reader, f"{name}.{key}", file)
    values = {}
    for key, hf_key in {**arch.config_keys, **_CONFIG_KEYS}.items():  # key_length wins
        value = _number(reader, f"{name}.{key}", file)
        if value is not None:
            values[hf_key] = value
    values.setdefault("vocab_size", len(metadata(reader, "tokenizer.ggml.tokens", file)))
    for token in ("bos", "eos", "padding"):
        token_id = metadata(reader, f"tokenizer.ggml.{token}_token_id", file, default=None)
        if token_id is not None:
            values[f"{'pad' if token == 'padding' else token}_token_id"] = token_id
    config = transformers.AutoConfig.for_model(arch.model_type, tie_word_embeddings=tied, **values)
    hf = config.to_dict()
    hf["architectures"] = [arch.hf_class]
    rope = hf["rope_parameters"]  # Gemma 3: scaling applies to the global layers only
    (rope.get("full_attention") or rope).update(_rope_scaling(reader, name, file))
    if arch.norm_offset:
        hf["query_pre_attn_scalar"] = _gemma_attention_scale(hf)
    for overrides in (_local_rope, _layer_types, _attention_scale):
        hf.update(overrides(reader, name, file, hf))
    hf.pop("_name_or_path", None)
    return hf


def _number(reader, key, file):
    """A number of the metadata (None when absent), one value for every layer."""
    value = metadata(reader, key, file, default=None)
    if isinstance(value, list):
        raise ValueError(f"{file}: metadata {key} is a list per layer ({value[:4]}...); only one "
                         "value for every layer is supported")
    # GGUF floats are float32: their shortest float32 spelling, not 9.999999747378752e-06
    return float(str(np.float32(value))) if isinstance(value, float) else value


def _no_place(file, key, what, name, field):
    return ValueError(f"{file}: metadata {key} ({what}) is not supported for architecture {name}: "
                      f"its config has no {field}")


def _local_rope(reader, name, file, hf):
    """{rope_parameters} with the sliding-window layers' own rope base (Gemma 3's), or {}."""
    key = f"{name}.rope.freq_base_swa"
    base = _number(reader, key, file)
    if base is None:
        return {}
    rope = hf["rope_parameters"]
    if "sliding_attention" not in rope:
        raise _no_place(file, key, "a rope base for the sliding-window layers", name,
                        "rope for sliding-window layers")
    return {"rope_parameters": {**rope, "sliding_attention": {**rope["sliding_attention"],
                                                              "rope_theta": base}}}


def _layer_types(reader, name, file, hf):
    """{layer_types} of the file's sliding-window pattern, or {}. The pattern is one bool a layer
    (sliding or not), or llama.cpp's period n: layer i slides unless i % n == n - 1 (all for n = 0)."""
    key = f"{name}.attention.sliding_window_pattern"
    pattern = metadata(reader, key, file, default=None)
    if pattern is None:
        return {}
    if hf.get("layer_types") is None or not hf.get("sliding_window"):
        raise _no_place(file, key, "which layers attend in a sliding window", name,
                        "sliding-window layers")
    layers = hf["num_hidden_layers"]
    if isinstance(pattern, list) and len(pattern) != layers:
        raise ValueError(f"{file}: metadata {key} has {len(pattern)} entries; expected one per layer "
                         f"({layers})")
    sliding = ([bool(s) for s in pattern] if isinstance(pattern, list) else
               [pattern == 0 or i % pattern < pattern - 1 for i in range(layers)])
    return {"layer_types": ["sliding_attention" if s else "full_attention" for s in sliding]}


def _attention_scale(reader, name, file, hf):
    """{query_pre_attn_scalar} of the file's attention scale (queries are scaled by scalar**-0.5),
    or {}."""
    key = f"{name}.attention.scale"
    scale = _number(reader, key, file)
    if scale is None:
        return {}
    if "query_pre_attn_scalar" not in hf:
        raise _no_place(file, key, "the attention's query scale", name, "query_pre_attn_scalar")
    if not scale > 0:
        raise ValueError(f"{file}: metadata {key} = {scale}; expected a positive scale")
    scalar = scale ** -2
    return {"query_pre_attn_scalar": round(scalar) if abs(scalar - round(scalar)) <= 1e-6 * scalar
            else scalar}


def _rope_scaling(reader, name, file):
    """{rope_type, factor} of the file's rope scaling, or {} (none)."""
    kind = metadata(reader, f"{name}.rope.scaling.type", file, default="none")
    if kind == "none":
        return {}
    if kind != "linear":
        raise ValueError(f"{file}: {name}.rope.scaling.type={kind!r}; only 'linear' rope scaling is "
                         "supported")
    return {"rope_type": "linear", "factor": metadata(reader, f"{name}.rope.scaling.factor", file)}


def _gemma_attention_scale(hf):
    """query_pre_attn_scalar as llama.cpp computes it (the file does not store it): head_dim, but
    hidden / heads for the 27B models (46 layers in Gemma 2, 62 in Gemma 3)."""
    if hf["num_hidden_layers"] in (46, 62):
        return hf["hidden_size"] // hf["num_attention_heads"]
    return hf["head_dim"]


def generation_config(reader, config, file):
    """generation_config.json: every token that ends a turn (EOS, and end-of-turn/-message where the
    file names them) stops generation."""
    eos = [metadata(reader, f"tokenizer.ggml.{kind}_token_id", file, default=None)
           for kind in ("eos", "eot", "eom")]
    eos = list(dict.fromkeys(token for token in eos if token is not None))
    values = {"bos_token_id": config.get("bos_token_id"),
              "eos_token_id": eos[0] if len(eos) == 1 else eos or None,
              "pad_token_id": config.get("pad_token_id")}
    return {key: value for key, value in values.items() if value is not None}


class HFTensors(Mapping):
    """{HF key: tensor in `dtype`} of every tensor of the file, each dequantised (llama.cpp's changes
    undone) only when asked for. Names, types and shapes are checked on construction, from the
    header alone; `shapes` and `sizes` (bytes) are known without reading any data."""

    def __init__(self, reader, name, arch, file, dtype):
        self.arch, self.file = arch, file
        self.heads = metadata(reader, f"{name}.attention.head_count", file)
        self.kv_heads = metadata(reader, f"{name}.attention.head_count_kv", file, default=self.heads)
        self.dtype = np.dtype(np.float32 if dtype == "float32" else _bfloat16())
        self._gguf = {}
        for tensor in reader.tensors:
            gguf_values(first_row(tensor), tensor, file)  # a type the gguf package reads
            self._gguf[hf_key(tensor.name, arch, file)] = tensor
        self.shapes = {key: hf_shape(tensor) for key, tensor in self._gguf.items()}
        self.sizes = {key: math.prod(shape) * self.dtype.itemsize
                      for key, shape in self.shapes.items()}

    def __getitem__(self, key):
        weights = dequantize(self._gguf[key], self.file)
        if self.arch.permuted_qk and ".self_attn.q_proj." in key:
            weights = unpermute_rotary_rows(weights, self.heads)
        elif self.arch.permuted_qk and ".self_attn.k_proj." in key:
            weights = unpermute_rotary_rows(weights, self.kv_heads)
        if self.arch.norm_offset and key.endswith("norm.weight"):
            weights = weights - np.float32(self.arch.norm_offset)
        return np.ascontiguousarray(weights.astype(self.dtype))

    def __contains__(self, key):  # without reading the tensor, as Mapping's would
        return key in self._gguf

    def __iter__(self):
        return iter(self._gguf)

    def __len__(self):
        return len(self._gguf)


def _bfloat16():
    import ml_dtypes  # comes with JAX

    return ml_dtypes.bfloat16


def hf_key(name, arch, file):
    """The Hugging Face name of GGUF tensor `name`; a one-line error for a name no rule maps."""
    if name == "rope_freqs.weight":
        raise ValueError(f"{file}: tensor rope_freqs.weight (per-frequency rope factors, as llama.cpp "
                         "stores Llama 3 rope scaling) is not supported")
    layer = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(weight|bias)", name)
    top = re.fullmatch(r"(\w+)\.(weight|bias)", name)
    if layer and layer[2] in arch.layer_names:
        return f"model.layers.{layer[1]}.{arch.layer_names[layer[2]]}.{layer[3]}"
    if top and top[1] in _TOP_NAMES:
        return f"{_TOP_NAMES[top[1]]}.{top[2]}"
    known = sorted(_TOP_NAMES) + [f"blk.N.{n}" for n in sorted(arch.layer_names)]
    raise ValueError(f"{file}: tensor {name} has no Hugging Face name for architecture "
                     f"{arch.model_type}; known: {', '.join(known)} (.weight/.bias)")


def hf_shape(tensor):
    """The tensor's shape in Hugging Face's [out, in] order (GGUF lists dimensions reversed)."""
    return tuple(int(n) for n in reversed(tensor.shape))


def first_row(tensor):
    """The first row of the tensor's data, as the file stores it (blocks of a quantised type)."""
    return tensor.data.reshape(-1, tensor.data.shape[-1])[:1]


def dequantize(tensor, file):
    """The tensor as float32 in Hugging Face's shape."""
    values = gguf_values(tensor.data, tensor, file)
    return np.asarray(values, dtype=np.float32).reshape(hf_shape(tensor))


def gguf_values(data, tensor, file):
    """`data` (rows of `tensor`) dequantised by the gguf package; a one-line error for a type it
    cannot read."""
    import gguf

    try:
        return gguf.quants.dequantize(data, tensor.tensor_type)
    except (NotImplementedError, gguf.quants.QuantError, KeyError):
        raise ValueError(f"{file}: tensor {tensor.name} has type {tensor.tensor_type.name}, which the "
                         "gguf package cannot dequantise") from None


def unpermute_rotary_rows(weights, heads):
    """Undo llama.cpp's `permute` (convert_hf_to_gguf.py, LlamaModel): within each head it interleaved
    the two halves of the rows (rotary pairs (i, i + d/2) became neighbours (2i, 2i + 1))."""
    half = weights.shape[0] // heads // 2
    rows = weights.reshape(heads, half, 2, *weights.shape[1:])
    return rows.swapaxes(1, 2).reshape(weights.shape)

