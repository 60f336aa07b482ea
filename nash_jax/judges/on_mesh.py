"""What the judges that run a model (PairRM, the LLM judge, HF reward models) share: the model's state
on a mesh (one device by default), programs jitted over it, batches placed on it, and the narrowest
width bucket of the decoder judges."""

import jax
from flax import nnx

from nash_jax import parallel

MIN_WIDTH = 16  # the narrowest row-width bucket of the decoder judges (powers of two above it)


def per_call(batch_size, shards, per_item=1):
    """Items of `per_item` rows each per device call: as many as `batch_size` rows hold, rounded down
    to a multiple of the mesh's data shards, but at least one item per shard (the fewest a sharded
    call can take); the same for every call, so the compiled shapes stay fixed."""
    items = max(1, batch_size // per_item)
    return max(shards, items - items % shards)


def default_mesh(mesh=None):
    """`mesh`, or a mesh of the first device when there is none."""
    return mesh or parallel.make_mesh(devices=jax.devices()[:1])


class OnMesh:
    """An NNX model's state placed on `mesh` (its variables sharded by their logical axes)."""

    def __init__(self, model, mesh=None):
        self.mesh = default_mesh(mesh)
        self.shards = parallel.data_shards(self.mesh)
        self.graphdef, state = nnx.split(model)
        self.state = jax.device_put(state, parallel.state_shardings(state, self.mesh))

    def per_call(self, batch_size, per_item=1):
        """per_call on this mesh's data shards."""
        return per_call(batch_size, self.shards, per_item)

    def jit(self, fn):
        """fn(model, *arrays) jitted, called as program(state, *placed arrays). Each call makes a new
        program, so that its cache holds exactly what its judge compiled."""
        graphdef = self.graphdef
        return jax.jit(parallel.traced_on(self.mesh, lambda state, *arrays: fn(nnx.merge(graphdef, state),
                                                                                *arrays)))

    def run(self, program, *arrays):
        """program on this state and host arrays placed over the data shards (every process holds
        them whole), its output back on the host."""
        placed = [parallel.place_global_array(a, parallel.batch_sharding(self.mesh, a.ndim))
                  for a in arrays]
        return parallel.gather_to_host(program(self.state, *placed))
