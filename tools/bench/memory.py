"""Peak memory of one SPPO update step with a 128K vocabulary, full logits vs chunked log-probs, from
the compiled program's memory analysis (nothing runs: the step is compiled on abstract arrays), and
the step time of both on a small vocabulary, where they run.

    python tools/bench/memory.py [--vocab 128256] [--batch 8] [--length 1024] [--time-vocab 8192]

One JSON line per case. `ratio` of the memory case is full / chunked temporaries (>1: chunked holds
less); of the time case, full / chunked seconds (>1: chunked is faster).
"""

import argparse
import time

import jax
import numpy as np

from common import emit
from nash_jax import parallel
from nash_jax.models.llama import LlamaConfig
from nash_jax.engine.plan import abstract_batch, abstract_train_state, compiled_memory
from nash_jax.config import OptimizerConfig
from nash_jax.train import make_optimizer, make_step


def model(vocab, hidden, layers):
    return LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden,
                       num_layers=layers, num_heads=hidden // 64, num_kv_heads=max(1, hidden // 256),
                       head_dim=64)


def build(llama, chunk, mesh):
    tx, schedule = make_optimizer(OptimizerConfig(name="adamw", learning_rate=1e-5,
                                                  warmup_ratio=0.0), 10)
    model_def, state, shardings = abstract_train_state(llama, tx, mesh)
    step = make_step("sppo", model_def, tx, schedule, shardings, mesh, eta=1e3, logprob_chunk=chunk)
    return step, state


def memory_case(args, mesh):
    llama = model(args.vocab, args.hidden, args.layers)
    out = {}
    for chunk in (0, args.chunk):
        step, state = build(llama, chunk, mesh)
        start = time.perf_counter()
        compiled = step.jitted.lower(state, abstract_batch("sppo", args.batch, args.length, mesh)).compile()
        out[chunk] = {**compiled_memory(compiled), "compile_s": time.perf_counter() - start}
    full, chunked = out[0], out[args.chunk]
    logits = args.batch * (args.length - 1) * args.vocab * 4
    emit(case=f"sppo_step_memory_v{args.vocab}", vocab=args.vocab, hidden=args.hidden,
         layers=args.layers, batch=args.batch, length=args.length, logprob_chunk=args.chunk,
         fp32_logits_gib=round(logits / 2**30, 3),
         temp_gib=round(chunked["temp"] / 2**30, 3), peak_gib=round(chunked["total_bytes"] / 2**30, 3),
         peer="the same step with full [B, T, V] fp32 logits (logprob_chunk=0)",
         peer_temp_gib=round(full["temp"] / 2**30, 3), peer_peak_gib=round(full["total_bytes"] / 2**30, 3),
         ratio=round(full["temp"] / chunked["temp"], 2),
         peak_ratio=round(full["total_bytes"] / chunked["total_bytes"], 2),
         compile_s=round(chunked["compile_s"], 2), peer_compile_s=round(full["compile_s"], 2))


def time_case(args, mesh, vocab, batch, length, hidden, layers, chunk, name):
    from nash_jax.train import init_train_state
    from nash_jax.models.llama import Llama
    from flax import nnx

    llama = model(vocab, hidden, layers)
    rng = np.random.default_rng(0)
    batch_arrays = {"tokens": rng.integers(0, vocab, (batch, length)),
                    "segment_ids": np.ones((batch, length), np.int32),
                    "loss_mask": np.ones((batch, length), bool),
                    "anchor_logp": np.zeros(batch, np.float32),
                    "win_rate": rng.uniform(size=batch).astype(np.float32)}
    seconds = {}
    for c in (0, chunk):
        tx, schedule = make_optimizer(OptimizerConfig(name="adamw", learning_rate=1e-5,
                                                      warmup_ratio=0.0), 10)
        model_def, state, shardings = init_train_state(Llama(llama, rngs=nnx.Rngs(0)), tx, mesh=mesh)
        step = make_step("sppo", model_def, tx, schedule, shardings, mesh, eta=1e3, logprob_chunk=c)
        placed = step.place(batch_arrays)
        start = time.perf_counter()
        state, m = step.jitted(state, placed)
        jax.block_until_ready(m)
        compile_s = time.perf_counter() - start
        times = []
        for _ in range(args.repeats if length > 64 else 10 * args.repeats):  # tiny: noisy
            start = time.perf_counter()
            state, m = step.jitted(state, placed)
            jax.block_until_ready(m)
            times.append(time.perf_counter() - start)
        seconds[c] = (float(np.median(times)), compile_s)
    tokens = batch * (length - 1)
    (ours, ours_compile), (peer, peer_compile) = seconds[chunk], seconds[0]
    emit(case=name, vocab=vocab, hidden=hidden, layers=layers, batch=batch, length=length,
         logprob_chunk=chunk, tokens_per_s=round(tokens / ours, 1), time_s=round(ours, 4),
         compile_s=round(ours_compile, 2), peer="the same step with full logits (logprob_chunk=0)",
         peer_tokens_per_s=round(tokens / peer, 1), peer_time_s=round(peer, 4),
         peer_compile_s=round(peer_compile, 2), ratio=round(peer / ours, 3))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--chunk", type=int, default=1024)
    parser.add_argument("--time-vocab", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    mesh = parallel.make_mesh(devices=jax.devices()[:1])
    memory_case(args, mesh)
    # where the step runs on CPU: a mid-size vocabulary chunked in 4, and the tests' tiny model
    # (one chunk: the chunked path is the full one)
    time_case(args, mesh, args.time_vocab, 4, 256, 256, 2, 256, f"sppo_step_time_v{args.time_vocab}")
    time_case(args, mesh, 64, 8, 12, 32, 2, 1024, "sppo_step_time_tiny_test_model")


if __name__ == "__main__":
    main()
