"""Checkpoint tensors <-> NNX parameters: one declarative key table, one streaming loader, one exporter.

A model family describes its checkpoint layout as a `KeyMap`: a list of `Rule`s plus the regex of
each `{placeholder}` the rules use.

    KeyMap([
        Rule("model.embed_tokens.weight", "embed"),
        Rule("model.layers.{layer}.self_attn.{qkv}_proj.weight", "layers.attn.{qkv}_proj", IN_HEADS),
        Rule("model.layers.{layer}.mlp.{mlp}_proj.weight", "layers.mlp.{mlp}_proj", TRANSPOSE),
    ], placeholders={"qkv": "q|k|v", "mlp": "gate|up|down"}, ignored=r".*rotary_emb\\.inv_freq")

- `Rule.hf` is the checkpoint key template, `Rule.ours` the dotted path of our parameter (as
  `nnx.to_flat_state` spells it), `Rule.transform` how a checkpoint tensor becomes ours and back.
- `{layer}` (digits) is special. When it appears in `hf` but not in `ours`, our parameter is *stacked*:
  its leading axis is the layer, and checkpoint tensor `...layers.{i}...` fills slot i of it (the layout
  of scanned layers). When it appears in both, it is an ordinary placeholder (unrolled layers).
- Other placeholders must appear in both templates; their value is copied from one key to the other.
- The first rule that matches a key wins; keys matching `ignored` are skipped (buffers old
  checkpoints carry). A checkpoint key that no rule maps, or that maps to a parameter the model lacks,
  is "unexpected".

Loading (`load_into`) first reads every header and checks the whole checkpoint against the model's
abstract state (every missing slot, unexpected key and mis-shaped tensor named in one ValueError), then
reads tensor by tensor. A stacked parameter gets one host buffer of its final dtype, each layer's tensor
is written into its slot, and the buffer goes onto its devices (`NamedSharding` from the variable's
`logical_axes`) before the next parameter is read: the host holds at most one parameter (all its layers)
beyond the file pages, never a second copy of the model. Exporting (`checkpoint_tensors`) inverts it:
each stacked parameter is gathered once and split back into per-layer checkpoint tensors.

Tensor sources: `SafetensorsSource(files)` reads lazily from {key: file} (safetensors, one or sharded);
`ArraySource({key: array})` wraps tensors already in memory (e.g. a torch `.bin` read by the caller).
A source may hold keys for other parts of a model: pass `prefix=` to load only keys under it (the
prefix is stripped before matching) and leave the rest to the caller.
"""

import re
from dataclasses import dataclass, field
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import SafetensorError, safe_open

from nash_jax import parallel

LAYER = "layer"


@dataclass(frozen=True)
class Transform:
    """How one checkpoint tensor maps to one (per-layer slot of a) parameter of ours, and back.

    to_ours(tensor, shape) -> array of our `shape`; to_hf(array) -> the checkpoint tensor. `to_hf` is
    also evaluated abstractly to know the checkpoint shape to expect, so it must be shape-polymorphic
    numpy-style code (reshape / transpose), which also works on jax arrays.
    """

    name: str
    to_ours: Callable
    to_hf: Callable


COPY = Transform("copy", lambda t, shape: t, lambda a: a)
# torch Linear weights are [out, in]; ours are [in, out]
TRANSPOSE = Transform("transpose", lambda t, shape: t.T.reshape(shape), lambda a: a.T)
# [heads*dim, embed] -> [embed, heads, dim]
IN_HEADS = Transform("in_heads", lambda t, shape: t.T.reshape(shape),
                     lambda a: a.reshape(a.shape[0], -1).T)
# [heads*dim] -> [heads, dim]
HEADS = Transform("heads", lambda t, shape: t.reshape(shape), lambda a: a.reshape(-1))
# [embed, heads*dim] -> [heads, dim, embed]
HEADS_OUT = Transform("heads_out", lambda t, shape: t.T.reshape(shape),
                      lambda a: a.reshape(-1, a.shape[-1]).T)


@dataclass(frozen=True)
class Rule:
    hf: str
    ours: str
    transform: Transform = COPY

    @property
    def stacked(self):
        return "{" + LAYER + "}" in self.hf and "{" + LAYER + "}" not in self.ours


@dataclass(frozen=True)
class Slot:
    """Where one checkpoint tensor goes: our parameter path, the layer slot (None: unstacked)."""

    path: str
    layer: int | None
    transform: Transform


@dataclass
class KeyMap:
    rules: list
    placeholders: dict = field(default_factory=dict)  # name -> regex (LAYER is always digits)
    ignored: str | None = None  # regex of checkpoint keys to skip

    def __post_init__(self):
        values = {LAYER: r"\d+", **self.placeholders}

        def regex(template):
            pattern = re.escape(template)
            for name, alternatives in values.items():
                pattern = pattern.replace(re.escape("{" + name + "}"), f"(?P<{name}>{alternatives})")
            return re.compile(pattern)

        self._compiled = [(regex(r.hf), regex(r.ours), r) for r in self.rules]
        self._ignored = re.compile(self.ignored) if self.ignored else None

    def is_ignored(self, key):
        return bool(self._ignored and self._ignored.fullmatch(key))

    def to_ours(self, key):
        """The Slot of checkpoint `key`, or None when no rule maps it."""
        for hf_regex, _, rule in self._compiled:
            match = hf_regex.fullmatch(key)
            if match:
                groups = match.groupdict()
                layer = int(groups.pop(LAYER)) if rule.stacked else None
                return Slot(rule.ours.format(**groups), layer, rule.transform)
        return None

    def to_hf(self, path, layer=None):
        """(checkpoint key, transform) of our parameter `path` (slot `layer` when it is stacked)."""
        for _, ours_regex, rule in self._compiled:
            match = ours_regex.fullmatch(path)
            if match:
                if rule.stacked and layer is None:
                    raise KeyError(f"parameter {path} is stacked by layer; name the layer")
                groups = dict(match.groupdict(), **({LAYER: layer} if rule.stacked else {}))
                return rule.hf.format(**groups), rule.transform
        raise KeyError(f"no checkpoint key for parameter {path}")

    def is_stacked(self, path):
        return any(rule.stacked for _, ours_regex, rule in self._compiled if ours_regex.fullmatch(path))


# ---------------------------------------------------------------------------------------------------
# tensor sources

def open_safetensors(file):
    try:
        return safe_open(str(file), framework="numpy")
    except (SafetensorError, OSError) as err:
        raise ValueError(f"{file}: cannot read safetensors header: {err}") from None


class SafetensorsSource:
    """Lazy tensors from {key: safetensors file}; headers are read once, data on demand."""

    def __init__(self, files):
        self.files = dict(files)
        self._handles = {}

    def _handle(self, key):
        file = self.files[key]
        if file not in self._handles:
            self._handles[file] = open_safetensors(file)
        return self._handles[file]

    def keys(self):
        return sorted(self.files)

    def where(self, key):
        return f" in {getattr(self.files[key], 'name', self.files[key])}"

    def shape(self, key):
        return tuple(self._handle(key).get_slice(key).get_shape())

    def read(self, key):
        return self._handle(key).get_tensor(key)


class ArraySource:
    """Tensors already in memory: {key: array}."""

    def __init__(self, arrays):
        self.arrays = arrays

    def keys(self):
        return sorted(self.arrays)

    def where(self, key):
        return ""

    def shape(self, key):
        return tuple(np.shape(self.arrays[key]))

    def read(self, key):
        return np.asarray(self.arrays[key])


# ---------------------------------------------------------------------------------------------------
# loading and exporting

def flat_variables(state):
    """{dotted path: Variable} of an NNX state."""
    return {".".join(str(p) for p in path): v for path, v in nnx.to_flat_state(state)}


def _slot_shape(variable, slot):
    shape = variable.get_value().shape
    return shape[1:] if slot.layer is not None else shape


def _hf_shape(transform, shape):
    return jax.eval_shape(transform.to_hf, jax.ShapeDtypeStruct(shape, jnp.int8)).shape


def plan_load(state, key_map, source, *, prefix="", what="checkpoint"):
    """{our path: {layer or None: checkpoint key}} after checking every header against `state`.

    Raises one ValueError naming every unexpected, mis-shaped and missing tensor.
    """
    plan, problems = check_source(state, key_map, source, prefix=prefix)
    if problems:
        raise ValueError(f"{what} ({len(problems)} problems):\n  " + "\n  ".join(problems))
    return plan


def check_source(state, key_map, source, *, prefix=""):
    """(plan, problems): plan_load's plan, and a line for every unexpected, mis-shaped and missing
    tensor of `source` (only its keys and shapes are read)."""
    variables = flat_variables(state)
    plan, problems = {}, []
    for key in source.keys():
        if not key.startswith(prefix):
            continue
        name = key[len(prefix):]
        if key_map.is_ignored(name):
            continue
        slot = key_map.to_ours(name)
        variable = variables.get(slot.path) if slot else None
        layers = variable.get_value().shape[0] if variable is not None and slot.layer is not None \
            else None
        if variable is None or (layers is not None and slot.layer >= layers):
            problems.append(f"unexpected tensor {key!r}{source.where(key)}")
            continue
        got, want = source.shape(key), _hf_shape(slot.transform, _slot_shape(variable, slot))
        if got != tuple(want):
            problems.append(f"tensor {key!r}{source.where(key)} has shape {list(got)}; "
                            f"expected {list(want)}")
        plan.setdefault(slot.path, {})[slot.layer] = key
    for path in sorted(variables):
        stacked = key_map.is_stacked(path)
        slots = range(variables[path].get_value().shape[0]) if stacked else [None]
        for layer in slots:
            if layer not in plan.get(path, {}):
                try:
                    hf_key = prefix + key_map.to_hf(path, layer)[0]
                except KeyError:
                    hf_key = None
                where = f"layer {layer} of parameter {path}" if stacked else f"parameter {path}"
                problems.append(f"missing tensor {hf_key!r} (for {where})" if hf_key else
                                f"no checkpoint rule for {where}")
    return plan, problems


def load_into(state, key_map, source, *, mesh=None, axis_rules=None, prefix="",
              what="checkpoint"):
    """Fill every variable of the abstract NNX `state` (from `nnx.eval_shape`) from `source`.

    Each parameter keeps the dtype of its abstract variable and goes onto `mesh` by its logical axes
    (the default device without a mesh). Returns `state`, filled in place.
    """
    plan = plan_load(state, key_map, source, prefix=prefix, what=what)
    variables = flat_variables(state)
    for path, keys in plan.items():
        variable = variables[path]
        shape, dtype = variable.get_value().shape, variable.get_value().dtype
        if None in keys:
            transform = key_map.to_ours(keys[None][len(prefix):]).transform
            host = np.asarray(transform.to_ours(source.read(keys[None]), shape)).astype(dtype)
        else:
            host = np.empty(shape, dtype)  # the one host buffer; layers are written into their slots
            for layer, key in keys.items():
                transform = key_map.to_ours(key[len(prefix):]).transform
                host[layer] = transform.to_ours(source.read(key), shape[1:])
        variable.set_value(_place(host, variable, mesh, axis_rules))
    return state


def _place(host, variable, mesh, axis_rules):
    if mesh is None:
        return jax.device_put(host)
    sharding = parallel.variable_sharding(variable, mesh, axis_rules)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def checkpoint_tensors(state, key_map, *, prefix=""):
    """{checkpoint key: contiguous numpy tensor} of every variable of `state` (gathered to host),
    stacked parameters split back into one tensor per layer."""
    tensors = {}
    for path, variable in flat_variables(state).items():
        array = parallel.gather_to_host(variable.get_value())
        if key_map.is_stacked(path):
            for layer in range(array.shape[0]):
                key, transform = key_map.to_hf(path, layer)
                tensors[prefix + key] = np.ascontiguousarray(transform.to_hf(array[layer]))
        else:
            key, transform = key_map.to_hf(path)
            tensors[prefix + key] = np.ascontiguousarray(transform.to_hf(array))
    return tensors
