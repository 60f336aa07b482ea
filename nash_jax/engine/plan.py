"""Whether a training step fits its devices, from shapes alone: no weights read, no memory taken.

The model is built abstractly (`nnx.eval_shape`), the train state too (`jax.eval_shape` of the
optimiser's init), and every array is sharded by the rules table (parallel.py) on the config's mesh.
Per device:

  frozen       with model.lora: the frozen base at its dtype (int8/nf4 codes and scales), plus one
               layer's kernels dequantised to fp32, forward and backward, for a quantised one
  parameters   Σ shard bytes of the trained parameters (with LoRA: the adapters) on the mesh (exact)
  optimizer    Σ shard bytes of the optimiser slots, sharded like their parameters (exact)
  gradients    one gradient per parameter in its dtype, plus the fp32 accumulator of micro-batches
               when train.micro_batches > 1 (exact for train/steps.py's loss_and_grads)
  update       the optimiser update's intermediates: the new parameters exist whole before the
               non-finite check selects them; measured on XLA:CPU as ≈ 1× the parameter bytes
               (the compiled step's temporaries minus those of its gradient alone)
  activations  an estimate for one micro-batch: the layers' saved inputs (remat) or their
               intermediates (no remat), one layer's attention scores, the logits (full or chunked)

These are analytic (computed from the partition specs, for any mesh size, with an AbstractMesh), so
they answer for 8 × 80 GB on a laptop. When this machine has at least the mesh's devices, the update
step is also lowered and compiled on abstract arrays with those shardings, and its
`memory_analysis()` (arguments, outputs, temporaries, per device) is the figure that decides, except
for a remat model compiled by XLA:CPU: its schedule keeps every layer's activations with or without
remat (measured), so there the compiled figure is an upper bound and the analytic total decides.

The sampler's KV cache and the judge are not counted: this plans the training step. What it sizes
comes as a PlanInputs (shapes, optimiser, mesh sizes, micro-batches), which engine/planning.py
unpacks from a run config; nothing here reads one.
"""

import dataclasses
import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.sharding import AbstractMesh

from nash_jax import parallel
from nash_jax.config import parse_bytes
from nash_jax.engine.plan_text import TERMS as _TERMS  # noqa: F401  (the terms in order)
from nash_jax.engine.plan_text import gib, shortfall, size_text, table, to_json  # noqa: F401
from nash_jax.models import hf
from nash_jax.models import lora as lora_lib
from nash_jax.models.llama import LlamaConfig
from nash_jax.tasks import registry as builtin_models
from nash_jax.config import OptimizerConfig
from nash_jax.train import make_optimizer

# config.json of models whose directory need not be on this machine (`nash-jax plan --shape NAME`)
PRESETS = {
    "llama3_8b": dict(model_type="llama", vocab_size=128256, hidden_size=4096,
                      intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, rms_norm_eps=1e-5, rope_theta=500000.0,
                      tie_word_embeddings=False),
    "mistral_7b": dict(model_type="mistral", vocab_size=32000, hidden_size=4096,
                       intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                       num_key_value_heads=8, rms_norm_eps=1e-5, rope_theta=1000000.0,
                       sliding_window=None, tie_word_embeddings=False),
    "llama3.2_1b": dict(model_type="llama", vocab_size=128256, hidden_size=2048,
                        intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                        num_key_value_heads=8, head_dim=64, rms_norm_eps=1e-5, rope_theta=500000.0,
                        tie_word_embeddings=True),
}

PLAN_STEPS = 1000  # the schedule's length changes no memory: any will do


# ---------------------------------------------------------------------------------------------------
# shapes from the config

def model_config(model, shape=None, *, warm_start=None, builtin_tokenizer=None):
    """(the policy's LlamaConfig, where its shape came from): a preset's, the model directory's
    config.json, or a built-in task's warm-start model (model.path a tasks.registry name, sized by
    the `warm_start` section; `builtin_tokenizer` the tokenizer to size it for, by default that
    model's). `model`: the run's model section (path, dtypes, remat)."""
    m = model
    if shape is not None:
        if shape not in PRESETS:
            raise ValueError(f"--shape {shape!r}; expected one of {sorted(PRESETS)}")
        values, source = PRESETS[shape], f"preset {shape}"
    elif builtin_models.get(m.path) or builtin_tokenizer is not None:
        from nash_jax.models.tokenizer import load_tokenizer
        w = warm_start
        tokenizer = load_tokenizer(builtin_tokenizer or builtin_models.get(m.path).tokenizer_dir)
        values = builtin_models.tiny_llama_values(len(tokenizer), w.hidden_size, w.num_layers)
        source = f"the warm-start model of {m.path}"
    elif (Path(m.path) / "config.json").is_file():
        values, source = hf.read_config(m.path), str(Path(m.path) / "config.json")
    else:
        raise FileNotFoundError(f"model.path={m.path}: no config.json there; give a model directory, "
                                f"or the shape of a known model with --shape {{{','.join(PRESETS)}}}")
    llama = hf.config_from_hf(values, dtype=m.dtype, param_dtype=m.param_dtype, source=source)
    return dataclasses.replace(llama, remat=m.remat), source


def mesh_sizes(axes, devices):
    """{"data", "fsdp", "tensor"} sizes of a mesh of `axes` ({axis: size}, -1 = the rest) on `devices`."""
    sizes = dict(axes)
    fixed = math.prod(s for s in sizes.values() if s != -1)
    for name, size in sizes.items():
        if size == -1:
            if devices % fixed:
                raise ValueError(f"mesh {sizes}: {devices} devices are not a multiple of {fixed}")
            sizes[name] = devices // fixed
    if math.prod(sizes.values()) != devices:
        raise ValueError(f"mesh {sizes} needs {math.prod(sizes.values())} devices; planning for "
                         f"{devices} (--devices)")
    return sizes


@dataclasses.dataclass(frozen=True)
class StepShape:
    """What one update of a recipe's training step processes: its objective (train/objectives.py) and
    hyperparameters, the examples of one update (all micro-batches together) and the tokens of one."""
    objective: str
    hyperparameters: dict
    rows: int
    length: int


@dataclasses.dataclass(frozen=True)
class PlanInputs:
    """Everything the planner sizes, unpacked from a run config by engine/planning.py (not read here)."""
    llama: LlamaConfig  # the policy's shape, dtypes and remat
    source: str  # where that shape came from (a config.json, a preset, a built-in task)
    optimizer: OptimizerConfig
    step: StepShape  # the recipe's update
    mesh: dict  # {"data", "fsdp", "tensor"}: sizes, -1 = the devices left
    micro_batches: int = 1
    logprob_chunk: int = 1024
    sampling_temperature: float = 1.0  # a tempered objective's step divides its logits by it
    device_memory: str | None = None  # mesh.device_memory as written ("80GiB"), None: ask the device
    batch_sizes: dict = dataclasses.field(default_factory=dict)  # {what: examples}: must split over the mesh
    lora: object = None  # the model.lora section: adapters over a frozen (maybe quantised) base


def abstract_train_state(llama, optimizer, mesh, lora=None):
    """(ModelDef, TrainState of ShapeDtypeStructs carrying their shardings, TrainState of shardings);
    with a model.lora section the state's parameters are the adapters, and the ModelDef's frozen base
    is sharded ShapeDtypeStructs too."""
    from nash_jax.train.state import TrainState, param_shardings, split_model, train_state_shardings

    model_def, params = split_model(lora_lib.abstract_model(llama, lora))
    if model_def.frozen is not None:
        model_def = model_def.with_frozen(jax.tree.map(
            lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), model_def.frozen,
            param_shardings(model_def.frozen, mesh)))
    shardings = train_state_shardings(params, optimizer, mesh)
    shapes = TrainState(params=params, opt_state=jax.eval_shape(optimizer.init, params),
                        step=jax.ShapeDtypeStruct((), jnp.int32),
                        key=jax.ShapeDtypeStruct((2,), jnp.uint32))
    state = jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                         shapes, shardings)
    return model_def, state, shardings


def per_device_bytes(tree):
    """Σ over the leaves of a tree of sharded ShapeDtypeStructs of one device's shard, in bytes."""
    return sum(math.prod(leaf.sharding.shard_shape(leaf.shape)) * jnp.dtype(leaf.dtype).itemsize
               for leaf in jax.tree.leaves(tree))


def activation_bytes(llama, rows, length, logprob_chunk, tensor=1):
    """Estimated activation bytes of one micro-batch's forward + backward on one device.

    rows: sequences per device per micro-batch; length: tokens per sequence. With remat each layer
    keeps its input [rows, T, E] and one layer's intermediates live at a time; without, every layer
    keeps ~ its q, k, v, attention output, MLP gate/up/product and two norms. Attention scores and
    probabilities are fp32 [rows, H, T, T] (the reference attention); the logits fp32 [rows, T, V]
    (twice: values and their gradient), or [chunk, V] three times when chunked."""
    c = jnp.dtype(llama.dtype).itemsize
    tokens = rows * length
    e, i, h, kv, d = (llama.hidden_size, llama.intermediate_size, llama.num_heads,
                      llama.num_kv_heads, llama.head_dim)
    layer = tokens * (4 * e + (2 * h + 2 * kv) * d // tensor + 3 * i // tensor) * c
    scores = rows * (h // tensor) * length * length * (4 + c)
    remat = llama.remat != "none"
    saved = llama.num_layers * (tokens * e * c if remat else layer + scores)
    working = layer + scores if remat else 0
    logits = (3 * min(logprob_chunk, tokens) if logprob_chunk else 2 * tokens) * llama.vocab_size * 4
    return saved + working + logits


# ---------------------------------------------------------------------------------------------------
# the plan

def plan(inputs, *, devices=None, device_memory=None, compile_step=True):
    """A dict of what one device holds for the training step of `inputs` (a PlanInputs), and whether
    it fits.

    devices: how many devices the mesh spans (default: this machine's); device_memory: bytes per
    device (default: inputs.device_memory, else what the device reports, else unknown);
    compile_step: lower and compile the step when this machine has the devices."""
    llama, step = inputs.llama, inputs.step
    devices = devices or jax.device_count()
    sizes = mesh_sizes(inputs.mesh, devices)
    parallel.check_batch_sizes(inputs.batch_sizes, inputs.micro_batches, sizes["data"] * sizes["fsdp"])
    abstract = AbstractMesh(tuple(sizes[a] for a in parallel.MESH_AXES), parallel.MESH_AXES)
    tx, _ = make_optimizer(inputs.optimizer, PLAN_STEPS)
    model_def, state, _ = abstract_train_state(llama, tx, abstract, inputs.lora)
    rows = rows_per_device(step, inputs.micro_batches, sizes["data"] * sizes["fsdp"])
    terms = memory_terms(llama, state, rows, step.length, inputs, sizes["tensor"], model_def.frozen)
    memory, memory_source = _device_memory(inputs.device_memory, device_memory)
    result = {
        "model": inputs.source,
        "parameters_count": sum(math.prod(p.shape) for p in jax.tree.leaves(state.params)),
        "dtype": llama.dtype, "param_dtype": llama.param_dtype, "remat": llama.remat,
        "optimizer": inputs.optimizer.name, "objective": step.objective,
        "lora": None if inputs.lora is None else {"rank": inputs.lora.rank, "base": inputs.lora.base},
        "mesh": sizes, "devices": devices, "batch_size": step.rows,
        "micro_batches": inputs.micro_batches, "rows_per_device": rows, "length": step.length,
        "logprob_chunk": inputs.logprob_chunk,
        **{f"{k}_bytes": v for k, v in terms.items()},
        "analytic_total_bytes": sum(terms.values()),
        "device_memory_bytes": memory, "device_memory_source": memory_source,
        "compiled": None,
    }
    if compile_step and devices <= jax.device_count():
        result["compiled"] = compiled_step_memory(inputs, sizes)
    elif compile_step:
        result["compiled_skipped"] = (f"the mesh spans {devices} devices and this machine has "
                                      f"{jax.device_count()}: analytic figures only")
    return _verdict(result, llama, memory)


def rows_per_device(step, micro_batches, shards):
    """Token rows one device processes per micro-batch (an example of a pairwise objective is 2)."""
    from nash_jax.train import objectives

    per_example = math.prod(s for s in objectives.get(step.objective).token_shape if isinstance(s, int))
    return max(1, step.rows // (micro_batches * shards)) * per_example


def memory_terms(llama, state, rows, length, inputs, tensor, frozen=None):
    """{term: bytes per device} of the analytic plan (the module's docstring says what each is)."""
    params = per_device_bytes(state.params)
    dequantised = 0
    if inputs.lora is not None and inputs.lora.base != "none":  # one layer's kernels in fp32, twice
        e, i, h, kv, d = (llama.hidden_size, llama.intermediate_size, llama.num_heads,
                          llama.num_kv_heads, llama.head_dim)
        dequantised = 2 * 4 * (e * (2 * h + 2 * kv) * d + 3 * e * i) // tensor
    grads = params + (sum(math.prod(p.sharding.shard_shape(p.shape)) * 4
                          for p in jax.tree.leaves(state.params)) if inputs.micro_batches > 1 else 0)
    return {"frozen": (per_device_bytes(frozen) if frozen is not None else 0) + dequantised,
            "parameters": params, "optimizer": per_device_bytes(state.opt_state),
            "gradients": grads, "update": params,
            "activations": activation_bytes(llama, rows, length, inputs.logprob_chunk, tensor)}


def _verdict(result, llama, memory):
    """The plan with which figure decides, its total and whether it fits."""
    result["decided_by"] = "compiled" if result["compiled"] else "analytic"
    if result["compiled"] and llama.remat != "none" and jax.default_backend() == "cpu":
        # measured: XLA:CPU's compiled temporaries grow by the same bytes per layer with and without
        # remat (its schedule keeps every layer's activations), so here the compiled figure is an
        # upper bound of what a GPU/TPU compile of the same step needs
        result["decided_by"] = "analytic"
        result["compiled_note"] = ("XLA:CPU ignores remat in its memory schedule: the compiled "
                                   "figure is an upper bound; the analytic total decides")
    result["total_bytes"] = (result["compiled"]["total_bytes"] if result["decided_by"] == "compiled"
                             else result["analytic_total_bytes"])
    result["fits"] = None if memory is None else result["total_bytes"] <= memory
    return result


def _device_memory(written, given):
    """(bytes per device, where that figure came from): `given` (--device-memory), else `written`
    (mesh.device_memory), else what the device reports; (None, None) when nothing says."""
    if given is not None:
        return given, "--device-memory"
    if written:
        return parse_bytes(written, "mesh.device_memory"), "mesh.device_memory"
    device = jax.local_devices()[0]  # another process's devices cannot be asked
    stats = device.memory_stats() or {}  # None on CPU
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"]), f"{device.device_kind} memory_stats"
    return None, None


def device_memory(written):
    """Bytes per device of mesh.device_memory `written`, else what the device reports, else None."""
    return _device_memory(written, None)[0]


def abstract_batch(objective, n, length, mesh):
    """The objective's batch as sharded ShapeDtypeStructs: N = n examples, T = length tokens."""
    from nash_jax.train import objectives

    dtypes = {"tokens": jnp.int32, "segment_ids": jnp.int32, "loss_mask": jnp.bool_}
    out = {}
    for field, spec in objectives.get(objective).batch_shapes.items():
        shape = tuple(n if s == "N" else length if s == "T" else s for s in spec)
        out[field] = jax.ShapeDtypeStruct(shape, dtypes.get(field, jnp.float32),
                                          sharding=parallel.batch_sharding(mesh, len(shape)))
    return out


def compiled_memory(compiled):
    """The per-device figures of a compiled program's memory_analysis(), and their peak: arguments
    + outputs − donated (aliased) + temporaries."""
    m = compiled.memory_analysis()
    out = {k: int(getattr(m, f"{k}_size_in_bytes")) for k in
           ("argument", "output", "alias", "temp", "generated_code")}
    out["total_bytes"] = out["argument"] + out["output"] - out["alias"] + out["temp"]
    return out


def compiled_step_memory(inputs, sizes):
    """Lower and compile the update step of `inputs` on abstract arrays on a mesh of `sizes` of this
    machine's devices."""
    from nash_jax.train import make_step

    step = inputs.step
    tx, schedule = make_optimizer(inputs.optimizer, PLAN_STEPS)
    mesh = parallel.make_mesh(sizes["data"], sizes["fsdp"], sizes["tensor"],
                              devices=jax.devices()[:math.prod(sizes.values())])
    model_def, state, shardings = abstract_train_state(inputs.llama, tx, mesh, inputs.lora)
    compiled = make_step(step.objective, model_def, tx, schedule, shardings, mesh,
                         micro_batches=inputs.micro_batches, logprob_chunk=inputs.logprob_chunk,
                         sampling_temperature=inputs.sampling_temperature, **step.hyperparameters)
    batch = abstract_batch(step.objective, step.rows, step.length, mesh)
    return compiled_memory(compiled.jitted.lower(state, batch).compile())


def check_before_loading(inputs, devices, memory):
    """Refuse, in seconds, a run whose parameters, optimiser state and gradients alone cannot fit
    `memory` bytes per device on a mesh of `devices` devices (engine/planning.py finds the memory:
    mesh.device_memory, or what the device reports; on CPU neither says, and nothing is checked). The
    activation estimate only warns: the compiled step decides (`nash-jax plan`)."""
    result = plan(inputs, devices=devices, device_memory=memory, compile_step=False)
    certain = sum(result[f"{k}_bytes"] for k in ("frozen", "parameters", "optimizer", "gradients",
                                                  "update"))
    if certain > memory:
        result = {**result, "activations_bytes": 0, "total_bytes": certain, "fits": False}
        raise ValueError(f"the run cannot fit its devices, before any weights are read: "
                         f"{shortfall(result)} (activations not counted). `nash-jax plan` shows "
                         "the details")
    if not result["fits"]:
        print(f"warning: with the activation estimate the plan {shortfall(result)}; "
              "`nash-jax plan` compiles the step for the exact figure", file=sys.stderr)
    return result
