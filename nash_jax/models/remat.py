"""Per-layer rematerialisation by name, for every model whose layers are stacked and scanned."""

import jax

# what a layer keeps for the backward pass (the rest is recomputed)
REMAT_POLICIES = {
    "none": None,  # keep everything: no recomputation
    "full": jax.checkpoint_policies.nothing_saveable,  # keep only the layer's input
    "dots": jax.checkpoint_policies.checkpoint_dots,  # keep matmul outputs
    "dots_with_no_batch_dims": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def check_remat(name, what):
    if name not in REMAT_POLICIES:
        raise ValueError(f"{what} remat={name!r}; expected one of {sorted(REMAT_POLICIES)}")


def rematerialised(layer, name, *, prevent_cse=True, quantised_base=False):
    """`layer` under jax.checkpoint with the named policy; `layer` itself for "none". quantised_base:
    the layer dequantises its kernels (models/quantised.py), and "none" becomes "dots": a scan keeps,
    stacked over the layers, every value its body's backward reads, and without a policy that is every
    layer's dequantised kernel (the whole base in fp32: measured, tests/unit/models/test_lora.py);
    keeping matmul outputs only, the backward dequantises again."""
    if name == "none" and quantised_base:
        name = "dots"
    if name == "none":
        return layer
    return jax.checkpoint(layer, policy=REMAT_POLICIES[name], prevent_cse=prevent_cse)
