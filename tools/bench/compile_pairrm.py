"""PairRM's compile time against depth: the encoder + pairwise head lowered and compiled for one
batch shape (16 rows × 512 tokens, PairRM's relative-position table, tiny width) at 4, 16 and 32
layers, scanned vs unrolled. Only shapes are needed (abstract parameters), so nothing is allocated.
Scanned compile time should be flat in depth.

    python tools/bench/compile_pairrm.py [--layers 4 16 32] [--width 512] [--batch 16]

`cases()` yields (fields, run) pairs for another compile benchmark to run beside its own.
"""

import argparse
import time

import jax
import jax.numpy as jnp
from flax import nnx

from common import emit
from nash_jax.judges.pairrm import PairRMNet, PairwiseHead
from nash_jax.models.deberta import Deberta, DebertaConfig


def tiny_config(layers, scan_layers):
    """PairRM-large's attention layout (position buckets 256 over 512 positions, c2p + p2c) at width 64."""
    return DebertaConfig(vocab_size=1024, hidden_size=64, num_layers=layers, num_heads=4,
                         intermediate_size=256, max_relative_positions=512, position_buckets=256,
                         scan_layers=scan_layers)


def compile_seconds(layers, scan_layers, *, width=512, batch=16):
    """{"lower_s", "compile_s"} of PairRM's forward for [batch, width] rows."""
    config = tiny_config(layers, scan_layers)
    graphdef, state = nnx.split(nnx.eval_shape(lambda: PairRMNet(
        Deberta(config, rngs=nnx.Rngs(0)), PairwiseHead(64, "float32", nnx.Rngs(0)))))

    def forward(state, ids, mask, markers):
        return nnx.merge(graphdef, state)(ids, mask, markers)

    rows = jax.ShapeDtypeStruct((batch, width), jnp.int32)
    markers = jax.ShapeDtypeStruct((batch, 3), jnp.int32)
    start = time.perf_counter()
    lowered = jax.jit(forward).lower(state, rows, rows, markers)
    lowered_at = time.perf_counter()
    lowered.compile()
    done = time.perf_counter()
    return {"lower_s": round(lowered_at - start, 3), "compile_s": round(done - lowered_at, 3)}


def cases(layers=(4, 16, 32), *, width=512, batch=16):
    """(fields, run) per case: `run()` returns the timings to add to `fields`."""
    for scan in (True, False):
        for n in layers:
            fields = {"case": f"pairrm_compile_{'scanned' if scan else 'unrolled'}_{n}_layers",
                      "layers": n, "scan_layers": scan, "rows": batch, "width": width}
            yield fields, lambda n=n, scan=scan: compile_seconds(n, scan, width=width, batch=batch)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, nargs="+", default=[4, 16, 32])
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    total = {}
    for fields, run in cases(args.layers, width=args.width, batch=args.batch):
        times = run()
        total[fields["scan_layers"], fields["layers"]] = times["lower_s"] + times["compile_s"]
        emit(**fields, **times, peer=None, ratio=None, fraction_of_peak=None)
    shallow, deep = min(args.layers), max(args.layers)
    for scan in (True, False):
        emit(case=f"pairrm_compile_depth_growth_{'scanned' if scan else 'unrolled'}",
             layers=[shallow, deep],
             deep_over_shallow=round(total[scan, deep] / total[scan, shallow], 2))


if __name__ == "__main__":
    main()
