"""Parameter averages of iterates: θ̄ = (1/n) Σ θ_t, written as a Hugging Face directory.

SPPO's guarantee (multiplicative weights) is about the average of its iterates, while the last iterate
of the exact update can cycle when preferences are intransitive. The average policy is a mixture; its
parameter average is the cheap stand-in that checkpoint averaging uses in practice, and the report
evaluates it beside the iterates (`eval.average_iterates`) so that a flagged cycle can be checked
against the remedy. `nash-jax average RUN_DIR` writes one by hand.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

from nash_jax.models.export import export_policy
from nash_jax.models import hf

# config.json keys that may differ between iterates of one architecture
NOT_ARCHITECTURE = {"torch_dtype", "dtype", "_name_or_path", "transformers_version"}


def check_same_architecture(dirs):
    """Every directory is an HF model directory with the first one's architecture; else one error
    naming the directory and every differing key."""
    if not dirs:
        raise ValueError("no iterates to average; expected at least one model directory")
    configs = [hf.read_config(d) for d in dirs]
    first = configs[0]
    for path, config in zip(dirs[1:], configs[1:]):
        keys = sorted(k for k in set(first) | set(config)
                      if k not in NOT_ARCHITECTURE and first.get(k) != config.get(k))
        if keys:
            raise ValueError(f"{path} does not have the architecture of {dirs[0]}: "
                             + ", ".join(f"{k} ({config.get(k)!r} there, {first.get(k)!r} in the first)"
                                         for k in keys)
                             + "; expected iterates of one model")


def average_policies(dirs, out, *, mesh=None, dtype="float32", param_dtype=None, tokenizer_dir=None,
                     in_run=True):
    """Write the parameter average of the HF directories `dirs` to `out` (whole, or not at all); the
    sum is kept in fp32 and the average stored in the iterates' parameter dtype. Loads one iterate at
    a time (two models' worth of memory). Returns `out`. in_run: see models.export.export_policy."""
    dirs = [Path(d) for d in dirs]
    check_same_architecture(dirs)
    total = model = None
    for path in dirs:
        model = hf.load_pretrained(path, mesh=mesh, dtype=dtype, param_dtype=param_dtype)
        params = nnx.state(model, nnx.Param)
        as_f32 = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params)
        total = as_f32 if total is None else jax.tree.map(jnp.add, total, as_f32)
    average = jax.tree.map(lambda t, p: (t / len(dirs)).astype(p.dtype), total, params)
    nnx.update(model, average)
    export_policy(model, out, tokenizer_dir=tokenizer_dir or dirs[-1], in_run=in_run)
    return Path(out)
