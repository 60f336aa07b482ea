"""Compile time against depth: the SPPO training step and the sampler of a tiny-width Llama, and
PairRM's forward, with 4, 16 and 32 layers, scanned (one layer program under lax.scan) and unrolled
(one program per layer), on CPU.

Each case is lowered and compiled ahead of time (`jit(...).lower(...).compile()`), so the figure is
tracing + XLA compilation only; the sampler's figure is its first call minus a second call. The
persistent compilation cache is switched off. Target: scanned compile time flat in depth (32 layers
within 1.3x of 4 layers).

    python tools/bench/compile.py [--layers 4 16 32] [--cases train_step sampler pairrm]

Other models add a case to CASES: a function (layers, scan) -> (seconds of compilation, {extra
fields to print}), under a name.
"""

import argparse
import os
import time

os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from common import emit  # noqa: E402

jax.config.update("jax_enable_compilation_cache", False)

WIDTH = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_heads=4, num_kv_heads=2,
             head_dim=16)
BATCH, LENGTH = 4, 64


def tiny_llama(layers, scan, remat="none"):
    from nash_jax.models import Llama, LlamaConfig

    config = LlamaConfig(num_layers=layers, scan_layers=scan, remat=remat, **WIDTH)
    return Llama(config, rngs=nnx.Rngs(0))


def train_step_compile_s(layers, scan):
    """Lower and compile the SPPO step (forward, backward, AdamW) of the whole model."""
    from nash_jax import parallel
    from nash_jax.config import OptimizerConfig
    from nash_jax.train import init_train_state, make_optimizer, make_step

    mesh = parallel.make_mesh(devices=jax.devices()[:1])
    tx, schedule = make_optimizer(OptimizerConfig(name="adamw", learning_rate=1e-6,
                                                  schedule="constant", warmup_ratio=0.0,
                                                  clip_norm=1.0), 1000)
    model_def, state, shardings = init_train_state(tiny_llama(layers, scan), tx, mesh=mesh)
    step = make_step("sppo", model_def, tx, schedule, shardings, mesh, eta=1e3)
    rng = np.random.default_rng(0)
    batch = {"tokens": rng.integers(0, WIDTH["vocab_size"], (BATCH, LENGTH)),
             "segment_ids": np.ones((BATCH, LENGTH), np.int32),
             "loss_mask": np.ones((BATCH, LENGTH), bool),
             "win_rate": rng.uniform(size=BATCH).astype(np.float32),
             "anchor_logp": np.zeros(BATCH, np.float32)}
    placed = step.place(batch)
    start, cpu = time.perf_counter(), time.process_time()
    lowered = step.jitted.lower(state, placed)
    lowered.compile()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    # CPU seconds and the program's size depend less (not at all) on how busy the machine is
    return seconds, {"compile_cpu_s": round(cpu, 2), "hlo_lines": len(lowered.as_text().splitlines())}


def sampler_compile_s(layers, scan):
    """First generate() call minus a second one: K = 2 samples × 4 prompts × 16 new tokens."""
    from nash_jax.rollout.sampling import generate

    model = tiny_llama(layers, scan)
    prompts = [list(range(3, 3 + n)) for n in (5, 9, 12, 7)]

    def call():
        start, cpu = time.perf_counter(), time.process_time()
        generate(model, prompts, num_samples=2, max_new_tokens=16, key=jax.random.PRNGKey(0))
        return time.perf_counter() - start, time.process_time() - cpu

    (first, first_cpu), again = call(), min(call(), call())
    return first - again[0], {"compile_cpu_s": round(first_cpu - again[1], 2)}


def pairrm_compile_s(layers, scan):
    """PairRM's forward (tools/bench/compile_pairrm.py: PairRM-large's attention layout, width 64)."""
    from compile_pairrm import compile_seconds

    start = time.process_time()
    times = compile_seconds(layers, scan)
    return times["lower_s"] + times["compile_s"], {"compile_cpu_s": round(time.process_time() - start, 2)}


CASES = {"train_step": train_step_compile_s, "sampler": sampler_compile_s, "pairrm": pairrm_compile_s}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, nargs="+", default=[4, 16, 32])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    args = parser.parse_args()
    for case in args.cases:
        for scan in (True, False):
            seconds, cpu = {}, {}
            for layers in args.layers:
                jax.clear_caches()
                seconds[layers], extra = CASES[case](layers, scan)
                cpu[layers] = extra.get("compile_cpu_s")
                emit(case=f"compile_{case}", layers=layers, scan_layers=scan,
                     compile_s=round(seconds[layers], 2), **extra, width=WIDTH["hidden_size"],
                     batch=BATCH, length=LENGTH, backend=jax.default_backend())
            deepest, shallowest = max(seconds), min(seconds)
            emit(case=f"compile_{case}_depth_ratio", scan_layers=scan,
                 layers=f"{deepest}/{shallowest}",
                 ratio=round(seconds[deepest] / seconds[shallowest], 3),
                 cpu_ratio=round(cpu[deepest] / cpu[shallowest], 3) if cpu[shallowest] else None,
                 target="<= 1.3 when scanned")


if __name__ == "__main__":
    main()
