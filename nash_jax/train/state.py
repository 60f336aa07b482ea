"""The training state and where each of its arrays lives on the mesh."""

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from nash_jax import parallel


@flax.struct.dataclass
class ModelDef:
    """The static half of a split NNX model: merge it with parameters to get the model back.

    With LoRA adapters (models/lora.py) the parameters that train are the adapters, and `frozen`
    holds the base's: every policy that differs only in adapters (π_θ, π_0, an anchor) shares it.
    A jitted function takes `frozen` as an argument (`with_frozen`), never as a closed-over constant."""

    graphdef: Any = flax.struct.field(pytree_node=False)
    rest: Any  # non-parameter state (empty for the decoders here)
    frozen: Any = None  # the frozen base's nnx.State of Params (None: every parameter trains)

    def merge(self, params):
        frozen = () if self.frozen is None else (self.frozen,)
        return nnx.merge(self.graphdef, params, *frozen, self.rest)

    def with_frozen(self, frozen):
        return self.replace(frozen=frozen)


@flax.struct.dataclass
class TrainState:
    params: Any  # nnx.State of Params, in the parameter dtype
    opt_state: Any
    step: jax.Array  # steps taken, applied or skipped: the learning-rate schedule's position
    key: jax.Array  # raw uint32[2] PRNG key; each use folds in the step


def split_model(model):
    """(ModelDef, params) of an NNX model: its adapters when it carries LoRA adapters (the base's
    parameters then are the ModelDef's `frozen`), else every parameter."""
    if nnx.state(model, nnx.LoRAParam):
        graphdef, adapters, frozen, rest = nnx.split(model, nnx.LoRAParam, nnx.Param, ...)
        return ModelDef(graphdef, rest, frozen), adapters
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    return ModelDef(graphdef, rest), params


def param_shardings(params, mesh):
    """A tree shaped like `params` with the NamedSharding of every parameter (from the rules)."""
    return jax.tree.map(lambda v: v.replace(parallel.variable_sharding(v, mesh)), params,
                        is_leaf=lambda x: isinstance(x, nnx.Variable))


def train_state_shardings(params, optimizer, mesh):
    """TrainState of NamedShardings: parameters by the rules; every optimiser slot that mirrors a
    parameter (Adam moments, RMS averages) exactly like that parameter; everything else replicated."""
    replicated = NamedSharding(mesh, PartitionSpec())
    p_shardings = param_shardings(params, mesh)
    by_path = {path: (leaf.shape, sharding) for (path, leaf), sharding in zip(
        jax.tree_util.tree_flatten_with_path(params)[0], jax.tree.leaves(p_shardings))}

    def slot_sharding(path, leaf):
        for start in range(len(path)):  # the longest suffix of the slot's path that is a parameter
            match = by_path.get(tuple(path[start:]))
            if match and match[0] == leaf.shape:
                return match[1]
        return replicated

    opt_shapes = jax.eval_shape(optimizer.init, params)
    opt_shardings = jax.tree_util.tree_map_with_path(slot_sharding, opt_shapes)
    return TrainState(params=p_shardings, opt_state=opt_shardings, step=replicated, key=replicated)


def init_train_state(model, optimizer, *, mesh, seed=0):
    """(ModelDef, TrainState, its shardings), with parameters and optimiser state placed on the mesh
    before the first step, so that the step compiles once for these shardings."""
    model_def, params = split_model(model)
    shardings = train_state_shardings(params, optimizer, mesh)
    params = jax.device_put(params, shardings.params)
    opt_state = jax.jit(optimizer.init, out_shardings=shardings.opt_state)(params)
    state = TrainState(
        params=params, opt_state=opt_state,
        step=jax.device_put(jnp.zeros((), jnp.int32), shardings.step),
        key=jax.device_put(jax.random.PRNGKey(seed), shardings.key))
    return model_def, state, shardings
