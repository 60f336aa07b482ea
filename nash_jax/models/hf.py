"""Hugging Face directories <-> Llama-family NNX models.

`load_pretrained` reads config.json and the safetensors weights (one file or a sharded index) tensor
by tensor, puts each straight into its sharding on the mesh, and checks the whole checkpoint against
the model before reading any data, so that every missing, unexpected or mis-shaped tensor is named in
one error. `save_pretrained` writes the same layout back, so that transformers (and every serving engine
that reads HF checkpoints) loads the result.
"""

import dataclasses
import json
import re
import shutil
import weakref
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from nash_jax import parallel
from nash_jax.models.llama import Llama, LlamaConfig
from nash_jax.runs import write_atomically, write_text_atomically

SUPPORTED = {  # model_type -> the architectures name transformers writes
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json",
                   "chat_template.jinja", "chat_template.json", "generation_config.json")
DTYPES = ("float32", "bfloat16", "float16")
DEFAULT_MAX_SHARD_BYTES = 5 * 2**30

# HF key <-> our parameter path (dotted), and how an HF tensor becomes ours. Placeholders match
# PLACEHOLDERS; the first rule that matches wins.
KEY_MAP = [
    ("model.embed_tokens.weight", "embed", "copy"),
    ("lm_head.weight", "lm_head", "copy"),
    ("model.norm.weight", "final_norm.weight", "copy"),
    ("model.layers.{i}.input_layernorm.weight", "layers.{i}.input_norm.weight", "copy"),
    ("model.layers.{i}.post_attention_layernorm.weight", "layers.{i}.post_attn_norm.weight", "copy"),
    ("model.layers.{i}.self_attn.{qkv}_proj.weight", "layers.{i}.attn.{qkv}_proj", "in_heads"),
    ("model.layers.{i}.self_attn.{qkv}_proj.bias", "layers.{i}.attn.{qkv}_bias", "heads"),
    ("model.layers.{i}.self_attn.o_proj.weight", "layers.{i}.attn.o_proj", "heads_out"),
    ("model.layers.{i}.self_attn.o_proj.bias", "layers.{i}.attn.o_bias", "copy"),
    ("model.layers.{i}.self_attn.{qk}_norm.weight", "layers.{i}.attn.{qk}_norm.weight", "copy"),
    ("model.layers.{i}.mlp.{mlp}_proj.weight", "layers.{i}.mlp.{mlp}_proj", "transpose"),
    ("model.layers.{i}.mlp.{mlp}_proj.bias", "layers.{i}.mlp.{mlp}_bias", "copy"),
]
PLACEHOLDERS = {"i": r"\d+", "qkv": "q|k|v", "qk": "q|k", "mlp": "gate|up|down"}
IGNORED = re.compile(r".*rotary_emb\.inv_freq$")  # buffers that old checkpoints carry


def _template_regex(template):
    pattern = re.escape(template)
    for name, values in PLACEHOLDERS.items():
        pattern = pattern.replace(re.escape("{" + name + "}"), f"(?P<{name}>{values})")
    return re.compile(pattern)


_RULES = [(_template_regex(hf), _template_regex(ours), hf, ours, kind) for hf, ours, kind in KEY_MAP]


def hf_to_ours(hf_key):
    """(our dotted parameter path, transform kind), or None for a key we do not know."""
    for hf_regex, _, _, ours, kind in _RULES:
        match = hf_regex.fullmatch(hf_key)
        if match:
            return ours.format(**match.groupdict()), kind
    return None


def ours_to_hf(path):
    """(HF key, transform kind) for our dotted parameter path."""
    for _, ours_regex, hf, _, kind in _RULES:
        match = ours_regex.fullmatch(path)
        if match:
            return hf.format(**match.groupdict()), kind
    raise KeyError(f"no HF key for parameter {path}")


def _to_ours(kind, hf, shape):
    """HF tensor (Linear weights are [out, in]) -> our layout of `shape`."""
    if kind == "copy":
        return hf
    if kind in ("in_heads", "transpose"):  # [heads*dim, embed] -> [embed, heads, dim] / [in, out]
        return hf.T.reshape(shape)
    if kind == "heads":  # [heads*dim] -> [heads, dim]
        return hf.reshape(shape)
    if kind == "heads_out":  # [embed, heads*dim] -> [heads, dim, embed]
        return hf.T.reshape(shape)
    raise AssertionError(kind)


def _to_hf(kind, ours):
    if kind == "copy":
        return ours
    if kind in ("in_heads", "transpose"):
        return ours.reshape(ours.shape[0], -1).T
    if kind == "heads":
        return ours.reshape(-1)
    if kind == "heads_out":
        return ours.reshape(-1, ours.shape[-1]).T
    raise AssertionError(kind)


def _hf_shape(kind, shape):
    """The HF shape of one of our parameters, computed abstractly (no allocation)."""
    return jax.eval_shape(lambda x: _to_hf(kind, x), jax.ShapeDtypeStruct(shape, jnp.int8)).shape


def config_from_hf(hf, *, dtype="float32", param_dtype=None, source="config.json"):
    """LlamaConfig from a transformers config.json dict."""
    model_type = hf.get("model_type")
    if model_type not in SUPPORTED:
        archs = hf.get("architectures")
        raise ValueError(f"{source}: model_type={model_type!r} (architectures={archs}) is not supported; "
                         f"supported model types: {sorted(SUPPORTED)} ({sorted(SUPPORTED.values())})")
    for name in (dtype, param_dtype or dtype):
        if name not in DTYPES:
            raise ValueError(f"dtype {name!r} is not one of {DTYPES}")
    if hf.get("hidden_act", "silu") != "silu":
        raise ValueError(f"{source}: hidden_act={hf['hidden_act']!r}; only 'silu' is supported")
    heads = hf["num_attention_heads"]
    layers = hf["num_hidden_layers"]
    rope = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
    theta = rope.pop("rope_theta", hf.get("rope_theta", 10000.0))
    rope = {k: v for k, v in rope.items() if v is not None}
    if rope.get("rope_type", rope.get("type", "default")) == "default":
        rope = {}
    attention_bias = bool(hf.get("attention_bias") or False)
    return LlamaConfig(
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        intermediate_size=hf["intermediate_size"],
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
        rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
        rope_theta=float(theta),
        rope_scaling=tuple(sorted(rope.items())),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        qkv_bias=model_type == "qwen2" or attention_bias,
        o_bias=attention_bias and model_type != "qwen2",
        mlp_bias=bool(hf.get("mlp_bias") or False),
        qk_norm=model_type == "qwen3",
        sliding_windows=_sliding_windows(hf, model_type, layers),
        dtype=dtype,
        param_dtype=param_dtype or dtype,
        hf_config=dict(hf),
    )


def _sliding_windows(hf, model_type, layers):
    window = hf.get("sliding_window")
    if not window:
        return ()
    if model_type == "mistral":
        return (window,) * layers
    layer_types = hf.get("layer_types")
    if layer_types is None:  # qwen2/qwen3 written before layer_types existed
        if not hf.get("use_sliding_window"):
            return ()
        first = hf.get("max_window_layers", layers)
        layer_types = ["sliding_attention" if i >= first else "full_attention" for i in range(layers)]
    windows = tuple(window if kind == "sliding_attention" else None for kind in layer_types)
    return windows if any(windows) else ()


def read_config(path):
    """config.json of a local model directory as a dict; a clear error when it is not there."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"model directory {path} does not exist")
    config_path = path / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"{path} has no config.json; expected a Hugging Face model directory")
    try:
        return json.loads(config_path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{config_path} is not valid JSON: {err}") from None


def _weight_files(path):
    """{hf key: safetensors file} from model.safetensors or model.safetensors.index.json."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ValueError(f"{index} has no `weight_map`")
        missing = sorted({f for f in weight_map.values() if not (path / f).is_file()})
        if missing:
            raise FileNotFoundError(f"{index} names shard files that do not exist: {missing}")
        return {key: path / name for key, name in weight_map.items()}
    single = path / "model.safetensors"
    if single.is_file():
        with _open(single) as f:
            return {key: single for key in f.keys()}
    others = sorted(p.name for p in path.glob("*.bin")) + sorted(p.name for p in path.glob("*.pt"))
    hint = f" (found {others}: convert them to safetensors first)" if others else ""
    raise FileNotFoundError(f"{path} has neither model.safetensors nor "
                            f"model.safetensors.index.json{hint}")


def _open(file):
    try:
        return safe_open(str(file), framework="numpy")
    except (SafetensorError, OSError) as err:
        raise ValueError(f"{file}: cannot read safetensors header: {err}") from None


def _flat_params(state):
    """{dotted path: Variable} for every variable of an NNX state."""
    return {".".join(str(p) for p in path): variable for path, variable in nnx.to_flat_state(state)}


# Where each loaded model came from (for its tokenizer files on export). Kept beside the module rather
# than as an attribute of it: an attribute would enter the NNX graphdef, so that two loads of the same
# architecture from different directories would compile every jitted program twice.
_SOURCE_DIRS = weakref.WeakKeyDictionary()


def load_pretrained(path, *, mesh=None, dtype="float32", param_dtype=None, remat=False):
    """A ready Llama-family NNX model from a local HF directory, its weights placed on `mesh`.

    dtype: compute dtype; param_dtype: storage dtype (defaults to dtype). Without a mesh, the
    parameters go to the default device. Each tensor is read, converted and placed on its devices
    before the next is read, so the host never holds a second copy of the model.
    """
    path = Path(path)
    hf = read_config(path)
    config = config_from_hf(hf, dtype=dtype, param_dtype=param_dtype,
                            source=str(path / "config.json"))
    config = dataclasses.replace(config, remat=remat)
    graphdef, state = nnx.split(nnx.eval_shape(lambda: Llama(config, rngs=nnx.Rngs(0))))
    expected = _flat_params(state)
    plan, handles = _check_checkpoint(path, hf, config, expected)

    target_dtype = jnp.dtype(config.param_dtype)
    for ours, (hf_key, file, kind) in plan.items():
        variable = expected[ours]
        host = _to_ours(kind, handles[file].get_tensor(hf_key), variable.get_value().shape)
        host = np.asarray(host).astype(target_dtype)
        if mesh is None:
            variable.set_value(jax.device_put(host))
        else:
            sharding = parallel.variable_sharding(variable, mesh)
            variable.set_value(jax.make_array_from_callback(host.shape, sharding,
                                                            lambda idx, host=host: host[idx]))
    model = nnx.merge(graphdef, state)
    _SOURCE_DIRS[model] = str(path)
    return model


def _check_checkpoint(path, hf, config, expected):
    """Match every checkpoint tensor to a parameter by name and shape, reading headers only.

    Returns ({our path: (hf key, file, kind)}, {file: open handle}); raises one ValueError that lists
    every missing, unexpected and mis-shaped tensor.
    """
    files = _weight_files(path)
    plan, handles, problems = {}, {}, []
    for hf_key, file in sorted(files.items()):
        if IGNORED.fullmatch(hf_key):
            continue
        mapped = hf_to_ours(hf_key)
        if mapped is None or mapped[0] not in expected:
            if config.tie_word_embeddings and hf_key == "lm_head.weight":
                continue  # some tied checkpoints store the head too; the embedding is what we use
            problems.append(f"unexpected tensor {hf_key!r} in {file.name}")
            continue
        ours, kind = mapped
        if file not in handles:
            handles[file] = _open(file)
        hf_shape = tuple(handles[file].get_slice(hf_key).get_shape())
        want = _hf_shape(kind, expected[ours].get_value().shape)
        if hf_shape != want:
            problems.append(f"tensor {hf_key!r} in {file.name} has shape {list(hf_shape)}; "
                            f"expected {list(want)}")
        plan[ours] = (hf_key, file, kind)
    for ours in sorted(set(expected) - set(plan)):
        problems.append(f"missing tensor {ours_to_hf(ours)[0]!r} (for parameter {ours})")
    if problems:
        raise ValueError(f"checkpoint {path} does not match the {hf['model_type']} model "
                         f"({len(problems)} problems):\n  " + "\n  ".join(problems))
    return plan, handles


def save_pretrained(model, path, *, tokenizer_dir=None, max_shard_bytes=DEFAULT_MAX_SHARD_BYTES):
    """Write config.json + safetensors (sharded with an index above max_shard_bytes) + tokenizer files.

    tokenizer_dir: where to copy tokenizer files and the chat template from; defaults to the directory
    the model was loaded from, when known. Every file is written to a temporary name and renamed.
    """
    path = Path(path)
    config = model.config
    hf = dict(config.hf_config) or _hf_config_from(config)
    hf["torch_dtype"] = hf["dtype"] = config.param_dtype
    hf.setdefault("architectures", [SUPPORTED[hf["model_type"]]])

    tensors = {}
    for ours, variable in _flat_params(nnx.state(model, nnx.Param)).items():
        hf_key, kind = ours_to_hf(ours)
        tensors[hf_key] = np.ascontiguousarray(_to_hf(kind, parallel.gather_to_host(variable[...])))
    if jax.process_index() != 0:
        return path
    path.mkdir(parents=True, exist_ok=True)
    shards = _split_shards(tensors, max_shard_bytes)
    for name, shard in shards.items():
        write_atomically(path / name,
                         lambda tmp, shard=shard: save_file(shard, tmp, metadata={"format": "pt"}))
    index = path / "model.safetensors.index.json"
    if len(shards) > 1:
        weight_map = {key: name for name, shard in shards.items() for key in shard}
        total = sum(t.nbytes for t in tensors.values())
        write_text_atomically(index, json.dumps(
            {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))},
            indent=2))
    else:
        index.unlink(missing_ok=True)
        for stale in path.glob("model-*-of-*.safetensors"):
            stale.unlink()
    write_text_atomically(path / "config.json", json.dumps(hf, indent=2, sort_keys=True))
    source = Path(tokenizer_dir or _SOURCE_DIRS.get(model, "") or path)
    if source.resolve() != path.resolve():
        for name in TOKENIZER_FILES:
            if (source / name).is_file():
                write_atomically(path / name, lambda tmp, name=name: shutil.copyfile(source / name, tmp))
    return path


def _split_shards(tensors, max_bytes):
    """{file name: {key: tensor}}, greedily packing keys in order into files of ≤ max_bytes."""
    groups, current, size = [], {}, 0
    for key in sorted(tensors):
        nbytes = tensors[key].nbytes
        if current and size + nbytes > max_bytes:
            groups.append(current)
            current, size = {}, 0
        current[key] = tensors[key]
        size += nbytes
    groups.append(current)
    if len(groups) == 1:
        return {"model.safetensors": groups[0]}
    n = len(groups)
    return {f"model-{i + 1:05d}-of-{n:05d}.safetensors": g for i, g in enumerate(groups)}


def _hf_config_from(config):
    """A config.json dict for a model built in code (not loaded from HF)."""
    model_type = "qwen3" if config.qk_norm else "qwen2" if config.qkv_bias and not config.o_bias \
        else "llama"
    hf = {
        "model_type": model_type, "architectures": [SUPPORTED[model_type]],
        "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size, "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads, "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim, "rms_norm_eps": config.rms_norm_eps, "hidden_act": "silu",
        "tie_word_embeddings": config.tie_word_embeddings, "max_position_embeddings": 4096,
        "rope_parameters": {"rope_type": "default", **dict(config.rope_scaling),
                            "rope_theta": config.rope_theta},
    }
    if model_type == "llama":
        hf.update(attention_bias=config.o_bias, mlp_bias=config.mlp_bias)
    return hf
