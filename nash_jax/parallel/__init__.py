"""Meshes and the one table that maps logical axis names to mesh axes.

Every parameter names its axes logically (`vocab`, `embed`, `heads`, ...) in its `logical_axes`
metadata; `LOGICAL_AXIS_RULES` decides where each goes on the mesh `("data", "fsdp", "tensor")`. A mesh
axis that does not divide a dimension is dropped for that tensor (it is replicated along that axis
instead), so a model with 2 KV heads still loads on a mesh with tensor=4.
"""

import math
from dataclasses import dataclass

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nash_jax.parallel.padding import bucket_size

MESH_AXES = ("data", "fsdp", "tensor")

LOGICAL_AXIS_RULES = {
    "batch": ("data", "fsdp"),
    "vocab": "tensor",
    "embed": "fsdp",
    "heads": "tensor",
    "kv_heads": "tensor",
    "mlp": "tensor",
    "head_dim": None,
    "norm": None,
    "length": None,
    "layers": None,  # the stacked layer axis of scanned models: every device holds every layer
    "lora_rank": None,  # an adapter's rank (models/lora.py): A and B shard like their kernel otherwise
}


def make_mesh(data=1, fsdp=-1, tensor=1, devices=None):
    """A Mesh with axes ("data", "fsdp", "tensor"); one size may be -1, meaning all the rest."""
    devices = list(jax.devices() if devices is None else devices)
    sizes = {"data": data, "fsdp": fsdp, "tensor": tensor}
    free = [name for name, size in sizes.items() if size == -1]
    if len(free) > 1 or any(size == 0 or size < -1 for size in sizes.values()):
        raise ValueError(f"mesh sizes must be positive, with at most one -1; got {sizes}")
    fixed = math.prod(size for size in sizes.values() if size != -1)
    if free:
        if len(devices) % fixed:
            raise ValueError(f"mesh {sizes}: {len(devices)} devices are not a multiple of {fixed}")
        sizes[free[0]] = len(devices) // fixed
    if math.prod(sizes.values()) != len(devices):
        raise ValueError(f"mesh {sizes} needs {math.prod(sizes.values())} devices; "
                         f"{len(devices)} are available")
    shape = tuple(sizes[name] for name in MESH_AXES)
    return Mesh(np.asarray(devices).reshape(shape), MESH_AXES)


def logical_to_spec(logical_axes, shape, mesh, rules=None):
    """PartitionSpec for a tensor of `shape` whose dimensions carry `logical_axes` names."""
    rules = LOGICAL_AXIS_RULES if rules is None else rules
    if len(logical_axes) != len(shape):
        raise ValueError(f"logical axes {logical_axes} do not match shape {shape}")
    used = set()
    spec = []
    for name, dim in zip(logical_axes, shape):
        target = rules.get(name) if name is not None else None
        if name is not None and name not in rules:
            raise ValueError(f"logical axis {name!r} has no rule; known: {sorted(rules)}")
        axes = (target,) if isinstance(target, str) else tuple(target or ())
        # Keep only mesh axes of size > 1 that are unused so far and divide the dimension.
        kept = []
        for axis in axes:
            size = mesh.shape[axis]
            if size > 1 and axis not in used and dim % (size * math.prod(
                    mesh.shape[a] for a in kept)) == 0:
                kept.append(axis)
        used.update(kept)
        spec.append(None if not kept else kept[0] if len(kept) == 1 else tuple(kept))
    return PartitionSpec(*spec)


def state_shardings(state, mesh, rules=None):
    """NamedSharding for every variable of an NNX state (abstract or concrete), by its logical axes.

    Variables without `logical_axes` metadata (RNG counters, step counts) are replicated.
    """
    return jax.tree.map(lambda v: variable_sharding(v, mesh, rules), state,
                        is_leaf=lambda x: isinstance(x, nnx.Variable))


def variable_sharding(variable, mesh, rules=None):
    """NamedSharding of one NNX variable from its `logical_axes` metadata (replicated without)."""
    names = variable.get_metadata().get("logical_axes")
    shape = variable.get_value().shape
    spec = PartitionSpec() if names is None else logical_to_spec(names, shape, mesh, rules)
    return NamedSharding(mesh, spec)


def data_shards(mesh):
    """How many ways a batch is split: the mesh's data × fsdp devices."""
    return mesh.shape["data"] * mesh.shape["fsdp"]


def batch_multiple(mesh, micro_batches=1):
    """What a global batch must be a multiple of: micro-batches × the data shards."""
    return micro_batches * data_shards(mesh)


def check_batch_sizes(batch_sizes, micro_batches, shards):
    """ValueError unless each of `batch_sizes` ({what: examples per step}) splits into `micro_batches`
    micro-batches over `shards` data × fsdp devices: what `nash-jax run` and `nash-jax plan` both
    check, in the same words, before any work."""
    for key, size in batch_sizes.items():
        if size % (micro_batches * shards):
            raise ValueError(f"{key}={size} does not split into train.micro_batches="
                             f"{micro_batches} micro-batches over the mesh's data × fsdp = "
                             f"{shards} devices; expected a multiple of {micro_batches * shards}")


def pad_to_shards(rows, mesh, *, fill=None, bucket=False, buckets=None):
    """`rows` plus `fill` rows (default: copies of the first row) up to the next multiple of the
    mesh's data shards, or with `bucket`/`buckets`, up to the batch bucket (padding.bucket_size) that
    is such a multiple. Drop the padding rows from the results."""
    rows = list(rows)
    shards = data_shards(mesh)
    if bucket or buckets:
        size = bucket_size(len(rows), buckets, multiple_of=shards, what="batch size")
    else:
        size = len(rows) + (-len(rows) % shards)
    return rows + [rows[0] if fill is None else fill] * (size - len(rows))


def batch_sharding(mesh, ndim):
    """Shard the leading (batch) dimension over ("data", "fsdp"), replicate the rest."""
    return NamedSharding(mesh, PartitionSpec(("data", "fsdp"), *([None] * (ndim - 1))))


def rows_sharded(x, axis=0):
    """`x` with its row (batch) axis constrained to ("data", "fsdp") of the mesh that the function being
    traced runs on (`traced_on`), its other axes left to XLA; `x` itself outside such a function or
    where data × fsdp is one device (a one-device program is unchanged).

    Why: an embedding [V, E] is sharded on E over fsdp, and the rows looked up in it inherit that, so
    without this XLA contracted the MLP over a sharded E and kept every layer's [rows, T, mlp]
    activations whole on every device (SmolLM2's step on 8 devices: 2.7 GiB of scratch a device
    against 0.9 GiB with the rows sharded); the sampler's KV cache likewise."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.shape.get("data", 1) * mesh.shape.get("fsdp", 1) == 1:
        return x
    spec = [PartitionSpec.UNCONSTRAINED] * x.ndim
    spec[axis] = ("data", "fsdp")
    return jax.lax.with_sharding_constraint(x, PartitionSpec(*spec))


def traced_on(mesh, fn):
    """`fn` traced with `mesh` as the ambient mesh, so that `rows_sharded` inside it applies."""
    def traced(*args, **kwargs):
        with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
            return fn(*args, **kwargs)
    return traced


def gather_to_host(array):
    """A numpy copy of a global array on every process (all-gathered across hosts when sharded)."""
    if jax.process_count() > 1 and not array.is_fully_addressable:
        from jax.experimental import multihost_utils
        array = multihost_utils.process_allgather(array, tiled=True)
    return np.asarray(jax.device_get(array))


def place_batch_array(array, sharding):
    """A global array from this process's rows of a batch (all rows when there is one process)."""
    if isinstance(array, jax.Array) and array.sharding == sharding:
        return array
    return jax.make_array_from_process_local_data(sharding, np.asarray(array))


def place_global_array(array, sharding):
    """A global array from a host array that every process holds whole (each places only its shards).

    The placement for inputs that every process computes identically: prompts, judge rows, a recipe's
    training batch. Single-process, it is the same as place_batch_array."""
    if isinstance(array, jax.Array) and array.sharding == sharding:
        return array
    array = np.asarray(array)
    return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])


def barrier(name):
    """Wait until every process reaches `name` (a no-op with one process)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices(name)


def is_writer():
    """Whether this process writes shared files (process 0 of a multi-process run)."""
    return jax.process_index() == 0


@dataclass(frozen=True)
class DistributedConfig:
    """How this process joins a multi-process JAX run (one process per host, or several on one CPU)."""

    coordinator_address: str | None = None  # "host:port" of process 0; None = single process
    num_processes: int = 1
    process_id: int = 0
    cpu_collectives: str = "gloo"  # collectives between CPU processes


def init_distributed(config):
    """jax.distributed.initialize for a multi-process run; a no-op for a single process.

    Must run before anything touches a JAX device. On CPU it switches cross-process collectives to
    gloo, so that several processes on one machine (coordinator on 127.0.0.1) form one mesh.
    """
    if config.num_processes == 1:
        return
    if not config.coordinator_address:
        raise ValueError(f"{config.num_processes} processes need a coordinator_address (host:port)")
    if not 0 <= config.process_id < config.num_processes:
        raise ValueError(f"process_id={config.process_id} outside [0, {config.num_processes})")
    jax.config.update("jax_cpu_collectives_implementation", config.cpu_collectives)
    jax.distributed.initialize(coordinator_address=config.coordinator_address,
                               num_processes=config.num_processes, process_id=config.process_id)
