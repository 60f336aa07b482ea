"""Hugging Face directories <-> decoder-family NNX models (Llama, Mistral, Qwen, Gemma 2/3).

`load_pretrained` reads config.json and the safetensors weights (one file or a sharded index) tensor
by tensor, puts each straight into its sharding on the mesh, and checks the whole checkpoint against
the model before reading any data, so that every missing, unexpected or mis-shaped tensor is named in
one error. `save_pretrained` writes the same layout back, so that transformers (and every serving engine
that reads HF checkpoints) loads the result. config.json is mapped in models/hf_config.py; the
checkpoint layout is one key table per family below (Llama's, and Gemma's with its four norms a layer).
"""

import dataclasses
import json
import shutil
import weakref
from pathlib import Path

import jax
from flax import nnx
from safetensors import SafetensorError
from safetensors.numpy import save_file

from nash_jax.runs.files import write_atomically, write_text_atomically
from nash_jax.models import loading
from nash_jax.models.hf_config import SUPPORTED, config_from_hf, hf_config_from
from nash_jax.models.llama import Llama

__all__ = ["SUPPORTED", "config_from_hf", "key_map", "load_pretrained", "read_config",
           "save_pretrained"]

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json",
                   "chat_template.jinja", "chat_template.json", "generation_config.json")
DEFAULT_MAX_SHARD_BYTES = 5 * 2**30

# HF key <-> our parameter path: layers are stacked, so `{layer}` picks the slot of a stacked parameter.
# Our `post_attn_norm` is the norm before the MLP: HF Llama's post_attention_layernorm, HF Gemma's
# pre_feedforward_layernorm (Gemma's post_attention_layernorm norms the attention's output).
LLAMA_NORMS = [
    loading.Rule("model.layers.{layer}.post_attention_layernorm.weight",
                 "layers.post_attn_norm.weight"),
]
GEMMA_NORMS = [
    loading.Rule("model.layers.{layer}.post_attention_layernorm.weight", "layers.attn_out_norm.weight"),
    loading.Rule("model.layers.{layer}.pre_feedforward_layernorm.weight",
                 "layers.post_attn_norm.weight"),
    loading.Rule("model.layers.{layer}.post_feedforward_layernorm.weight",
                 "layers.mlp_out_norm.weight"),
]
SHARED_RULES = [
    loading.Rule("model.embed_tokens.weight", "embed"),
    loading.Rule("lm_head.weight", "lm_head"),
    loading.Rule("model.norm.weight", "final_norm.weight"),
    loading.Rule("model.layers.{layer}.input_layernorm.weight", "layers.input_norm.weight"),
    loading.Rule("model.layers.{layer}.self_attn.{qkv}_proj.weight", "layers.attn.{qkv}_proj",
                 loading.IN_HEADS),
    loading.Rule("model.layers.{layer}.self_attn.{qkv}_proj.bias", "layers.attn.{qkv}_bias",
                 loading.HEADS),
    loading.Rule("model.layers.{layer}.self_attn.o_proj.weight", "layers.attn.o_proj",
                 loading.HEADS_OUT),
    loading.Rule("model.layers.{layer}.self_attn.o_proj.bias", "layers.attn.o_bias"),
    loading.Rule("model.layers.{layer}.self_attn.{qk}_norm.weight", "layers.attn.{qk}_norm.weight"),
    loading.Rule("model.layers.{layer}.mlp.{mlp}_proj.weight", "layers.mlp.{mlp}_proj",
                 loading.TRANSPOSE),
    loading.Rule("model.layers.{layer}.mlp.{mlp}_proj.bias", "layers.mlp.{mlp}_bias"),
]


def _family_key_maps(norm_rules):
    """(untied, tied) key maps of one family: the shared rules plus its layer norms. Some tied
    checkpoints store the head too; the embedding is what a tied model uses."""
    untied = loading.KeyMap(SHARED_RULES + norm_rules,
                            placeholders={"qkv": "q|k|v", "qk": "q|k", "mlp": "gate|up|down"},
                            ignored=r".*rotary_emb\.inv_freq")  # buffers that old checkpoints carry
    return untied, dataclasses.replace(untied, ignored=untied.ignored + r"|lm_head\.weight")


KEY_MAP, TIED_KEY_MAP = _family_key_maps(LLAMA_NORMS)
GEMMA_KEY_MAP, GEMMA_TIED_KEY_MAP = _family_key_maps(GEMMA_NORMS)


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
        try:
            weight_map = json.loads(index.read_text()).get("weight_map")
        except (json.JSONDecodeError, AttributeError):
            weight_map = None
        if not isinstance(weight_map, dict):
            raise ValueError(f"{index} is not a shard index (JSON with a `weight_map` of tensor name "
                             "to file name)")
        for key, name in weight_map.items():
            _check_shard_name(index, key, name)
        missing = sorted({f for f in weight_map.values() if not (path / f).is_file()})
        if missing:
            raise FileNotFoundError(f"{index} names shard files that do not exist: {missing}")
        return {key: path / name for key, name in weight_map.items()}
    single = path / "model.safetensors"
    if single.is_file():
        with loading.open_safetensors(single) as f:
            return {key: single for key in f.keys()}
    others = sorted(p.name for p in path.glob("*.bin")) + sorted(p.name for p in path.glob("*.pt"))
    hint = f" (found {others}: convert them to safetensors first)" if others else ""
    raise FileNotFoundError(f"{path} has neither model.safetensors nor "
                            f"model.safetensors.index.json{hint}")


def _check_shard_name(index, key, name):
    """A shard file of the index must lie in the model folder: a relative path without `..`."""
    if not isinstance(name, str) or not name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise ValueError(f"{index}: weight_map[{key!r}] = {name!r}; expected the name of a shard file "
                         "inside the model folder (a relative path without '..')")


# Where each loaded model came from (for its tokenizer files on export). Kept beside the module rather
# than as an attribute of it: an attribute would enter the NNX graphdef, so that two loads of the same
# architecture from different directories would compile every jitted program twice.
_SOURCE_DIRS = weakref.WeakKeyDictionary()


def load_pretrained(path, *, mesh=None, dtype="float32", param_dtype=None, remat=False,
                    attention="auto", scan_layers=True):
    """A ready Llama-family NNX model from a local HF directory, its weights placed on `mesh`.

    dtype: compute dtype; param_dtype: storage dtype (defaults to dtype); remat: per-layer policy
    (see models/remat.py; True = "full"); attention: see models/attention.py. Without a mesh, the
    parameters go to the default device. The whole checkpoint is checked from its headers first;
    then each parameter is read (a stacked one layer by layer into one buffer) and placed on its
    devices before the next, so the host never holds a second copy of the model.
    """
    path = Path(path)
    hf = read_config(path)
    config = config_from_hf(hf, dtype=dtype, param_dtype=param_dtype,
                            source=str(path / "config.json"))
    config = dataclasses.replace(config, remat=remat, attention=attention, scan_layers=scan_layers)
    graphdef, state = abstract_model(config)
    loading.load_into(state, key_map(config), loading.SafetensorsSource(_weight_files(path)),
                      mesh=mesh, what=f"checkpoint {path} does not match the {hf['model_type']} model")
    model = nnx.merge(graphdef, state)
    _SOURCE_DIRS[model] = str(path)
    return model


def abstract_model(config):
    """(graphdef, abstract state) of the model of `config`: shapes and dtypes, no arrays."""
    return nnx.split(nnx.eval_shape(lambda: Llama(config, rngs=nnx.Rngs(0))))


def checkpoint_problems(hf, shapes, *, source="config.json"):
    """What load_pretrained would refuse in a checkpoint of {HF key: shape} under config.json's dict
    `hf`: a line for every missing, unexpected and mis-shaped tensor (empty when it loads)."""
    config = config_from_hf(hf, source=source)
    shape_only = {key: jax.ShapeDtypeStruct(tuple(shape), "float32") for key, shape in shapes.items()}
    return loading.check_source(abstract_model(config)[1], key_map(config),
                                loading.ArraySource(shape_only))[1]


def key_map(config):
    """The key table of config's family (Gemma's when its layers have four norms), tied or not."""
    maps = (GEMMA_KEY_MAP, GEMMA_TIED_KEY_MAP) if config.sandwich_norms else (KEY_MAP, TIED_KEY_MAP)
    return maps[bool(config.tie_word_embeddings)]


def save_pretrained(model, path, *, tokenizer_dir=None, max_shard_bytes=DEFAULT_MAX_SHARD_BYTES):
    """Write config.json + safetensors (sharded with an index above max_shard_bytes) + tokenizer files.

    tokenizer_dir: where to copy tokenizer files and the chat template from; defaults to the directory
    the model was loaded from, when known. Every file is written to a temporary name and renamed.
    """
    path = Path(path)
    config = model.config
    hf = dict(config.hf_config) or hf_config_from(config)
    hf["torch_dtype"] = hf["dtype"] = config.param_dtype
    hf.setdefault("architectures", [SUPPORTED[hf["model_type"]]])

    tensors = loading.checkpoint_tensors(nnx.state(model, nnx.Param), key_map(config))
    if jax.process_index() != 0:
        return path
    write_safetensors(path, tensors, max_shard_bytes)
    write_text_atomically(path / "config.json", json.dumps(hf, indent=2, sort_keys=True))
    source = Path(tokenizer_dir or _SOURCE_DIRS.get(model, "") or path)
    if source.resolve() != path.resolve():
        for name in TOKENIZER_FILES:
            if (source / name).is_file():
                write_atomically(path / name, lambda tmp, name=name: shutil.copyfile(source / name, tmp))
    return path


def write_safetensors(path, tensors, max_shard_bytes=DEFAULT_MAX_SHARD_BYTES, *, sizes=None):
    """{HF key: numpy tensor} -> model.safetensors, or shards of ≤ max_shard_bytes with their index
    (and no stale file of the other layout left beside them). Each file is written and renamed.

    `tensors` may be any mapping that makes a tensor when asked for it (with `sizes`, {key: bytes},
    so that it is asked only while its shard is written): then the host holds one shard at a time."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    sizes = sizes if sizes is not None else {key: t.nbytes for key, t in tensors.items()}
    shards = _split_shards(sizes, max_shard_bytes)

    def save(tmp, keys, name):
        try:
            save_file({key: tensors[key] for key in keys}, tmp, metadata={"format": "pt"})
        except SafetensorError as err:  # its I/O errors (a full disk) are OSErrors to the caller
            raise OSError(f"writing {path / name}: {err}") from None

    for name, keys in shards.items():
        write_atomically(path / name, lambda tmp, keys=keys, name=name: save(tmp, keys, name))
    index = path / "model.safetensors.index.json"
    if len(shards) > 1:
        weight_map = {key: name for name, keys in shards.items() for key in keys}
        total = sum(sizes.values())
        write_text_atomically(index, json.dumps(
            {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))},
            indent=2))
    else:
        index.unlink(missing_ok=True)
        for stale in path.glob("model-*-of-*.safetensors"):
            stale.unlink()


def _split_shards(sizes, max_bytes):
    """{file name: [key]} of {key: bytes}, greedily packing keys in order into files of ≤ max_bytes."""
    groups, current, size = [], [], 0
    for key in sorted(sizes):
        nbytes = sizes[key]
        if current and size + nbytes > max_bytes:
            groups.append(current)
            current, size = [], 0
        current.append(key)
        size += nbytes
    groups.append(current)
    if len(groups) == 1:
        return {"model.safetensors": groups[0]}
    n = len(groups)
    return {f"model-{i + 1:05d}-of-{n:05d}.safetensors": g for i, g in enumerate(groups)}
