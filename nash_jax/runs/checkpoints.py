"""Orbax checkpoints of a training loop: named array trees and a JSON `extra` per step, the last two
kept; host-local values (numpy, or replicated arrays of one process) saved from the host; an unreadable
newer checkpoint set aside for the newest that reads."""

import os
import sys
from pathlib import Path

import numpy as np


def checkpoint_manager(directory, every):
    """An orbax CheckpointManager keeping the last two checkpoints (saved every `every` steps)."""
    import orbax.checkpoint as ocp

    # cleanup_tmp_directories: a save cut off by a kill leaves a temporary step directory behind
    options = ocp.CheckpointManagerOptions(max_to_keep=2, save_interval_steps=every, create=True,
                                           cleanup_tmp_directories=True)
    return ocp.CheckpointManager(Path(directory).absolute(), options=options)


def save_checkpoint(manager, step, trees, extra):
    """Save named array trees ({"state": train state, ...}) and `extra` (JSON: the data iterator's
    state) as the checkpoint of `step`, and wait until it is committed."""
    import orbax.checkpoint as ocp

    args = {name: ocp.args.StandardSave(_host_values(_boxed(tree))) for name, tree in trees.items()}
    manager.save(step, args=ocp.args.Composite(extra=ocp.args.JsonSave(extra), **args), force=True)
    manager.wait_until_finished()


def restore_checkpoint(manager, like):
    """(step, {name: tree}, extra) of the latest readable checkpoint, each tree placed like like[name]
    (same shapes, dtypes and shardings); None if there is none. Unreadable newer ones are set aside."""
    import jax
    import orbax.checkpoint as ocp

    from nash_jax.parallel import barrier, is_writer

    def target(leaf):  # host values come back as numpy arrays, the rest placed like `leaf`
        return _host_value(leaf) if _is_host_local(leaf) else ocp.utils.to_shape_dtype_struct(leaf)

    args = {name: ocp.args.StandardRestore(jax.tree.map(target, _boxed(tree))) for name, tree in like.items()}
    unreadable = []
    for step in sorted(manager.all_steps(), reverse=True):  # the newest that reads
        try:
            restored = manager.restore(step, args=ocp.args.Composite(extra=ocp.args.JsonRestore(),
                                                                     **args))
        except Exception as err:  # noqa: BLE001  (orbax raises many kinds for a damaged checkpoint)
            print(f"checkpoint {manager.directory}/{step} cannot be read ({type(err).__name__}: "
                  f"{str(err)[:200]}); trying an older one", file=sys.stderr)
            unreadable.append((step, err))
            continue
        if unreadable:  # set aside (not deleted), so that their steps can be saved again
            if is_writer():
                for bad, _ in unreadable:
                    os.replace(Path(manager.directory) / str(bad),
                               Path(manager.directory).parent / f"unreadable-checkpoint-{bad}")
            barrier("checkpoints set aside")
            manager.reload()
        trees = {name: jax.tree.map(_placed_like, _unboxed(restored[name], like[name]), like[name])
                 for name in like}
        return step, trees, restored["extra"]
    if unreadable:
        step, err = unreadable[0]
        raise ValueError(f"no checkpoint in {manager.directory} can be read (the newest, {step}: "
                         f"{type(err).__name__}: {str(err)[:300]}); restore them, or delete the folder "
                         "to redo the stage")
    return None


def _is_host_local(leaf):
    """A numpy array, or a jax array on this process's devices only while the run spans several
    processes (a small replicated value such as RAE baselines): orbax saves these from the host."""
    import jax

    if isinstance(leaf, np.ndarray):
        return True
    return isinstance(leaf, jax.Array) and jax.process_count() > 1 and leaf.is_fully_addressable


def _host_value(leaf):
    return np.asarray(leaf)


def _host_values(tree):
    import jax

    return jax.tree.map(lambda x: _host_value(x) if _is_host_local(x) else x, tree)


def _placed_like(restored, like):
    import jax

    if isinstance(like, jax.Array) and isinstance(restored, np.ndarray):
        return jax.device_put(restored, like.sharding)
    return restored


def _boxed(tree):
    """A lone array (a scalar baseline) as {"array": it}: orbax saves containers of arrays."""
    import jax

    return {"array": tree} if jax.tree_util.treedef_is_leaf(jax.tree.structure(tree)) else tree


def _unboxed(restored, like):
    import jax

    return restored["array"] if jax.tree_util.treedef_is_leaf(jax.tree.structure(like)) else restored
