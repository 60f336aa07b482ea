"""Sampling throughput on a ~25M-parameter Llama, against the peers' way of doing the same thing, on
the same weights and prompts in the same run.

  k_samples: K = 5 samples × 8 prompts × 128 new tokens, against transformers
             generate(do_sample=True, num_return_sequences=5).
  mixture:   geometric-mixture decoding of two models, 256 new tokens, against the same computation
             without a KV cache (TRL's GeometricMixtureWrapper runs with use_cache=False).

    python tools/bench/sampler.py [--prompts 8] [--mixture-prompts 2]
"""

import argparse
import tempfile

import jax
import numpy as np
import torch
import transformers

from common import emit, timings
from model_step import MODEL
from nash_jax.models import load_pretrained
from nash_jax.rollout.sampling import generate, mixture_generate


def random_prompts(n, vocab, seed=0):
    rng = np.random.default_rng(seed)
    return [list(rng.integers(3, vocab, rng.integers(16, 33))) for _ in range(n)]


def torch_mixture_no_cache(policy, reference, beta, prompt, new_tokens, generator):
    """What TRL's GeometricMixtureWrapper computes: full forwards of both models at every step."""
    seq = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(new_tokens):
            lp = policy(seq, use_cache=False).logits[:, -1].log_softmax(-1)
            lr = reference(seq, use_cache=False).logits[:, -1].log_softmax(-1)
            mixed = ((1 - beta) * lp + beta * lr).log_softmax(-1)
            token = torch.multinomial(mixed.exp(), 1, generator=generator)
            seq = torch.cat([seq, token], dim=1)
    return seq


def bench_k_samples(policy, torch_policy, prompts, k, new, *, case, pad_id=0, repeats=2):
    """K samples of `new` tokens per prompt (no EOS: every one runs the full length) with nash_jax's
    sampler and with transformers generate on the same prompts, left-padded; prints one JSON line."""
    keys = iter(range(100))

    def ours():
        s = generate(policy, prompts, num_samples=k, max_new_tokens=new, key=jax.random.PRNGKey(next(keys)))
        assert s.lengths.min() == new

    width = max(map(len, prompts))
    batch = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        batch[i, width - len(p):], mask[i, width - len(p):] = torch.tensor(p), 1

    def peer():
        with torch.no_grad():
            out = torch_policy.generate(batch, attention_mask=mask, do_sample=True, temperature=1.0,
                                        top_p=1.0, top_k=0, num_return_sequences=k,
                                        max_new_tokens=new, min_new_tokens=new, pad_token_id=pad_id)
        assert out.shape[1] == width + new

    compile_s, ours_times = timings(ours, repeats=repeats)
    _, peer_times = timings(peer, repeats=repeats)
    tokens = len(prompts) * k * new
    ours_s, peer_s = min(ours_times), min(peer_times)
    emit(case=case, prompts=len(prompts), samples_per_prompt=k, new_tokens=new,
         tokens_per_s=round(tokens / ours_s, 1), time_s=round(ours_s, 3), compile_s=round(compile_s, 2),
         peer=f"transformers generate(do_sample=True, num_return_sequences={k})",
         peer_tokens_per_s=round(tokens / peer_s, 1), peer_time_s=round(peer_s, 3),
         ratio=round(peer_s / ours_s, 3), fraction_of_peak=None)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--mixture-prompts", type=int, default=2)
    parser.add_argument("--mixture-new-tokens", type=int, default=256)
    args = parser.parse_args()
    config = transformers.LlamaConfig(**MODEL)

    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        torch_policy = transformers.LlamaForCausalLM(config).eval()
        torch_policy.save_pretrained(f"{tmp}/policy")
        torch.manual_seed(1)
        torch_reference = transformers.LlamaForCausalLM(config).eval()
        torch_reference.save_pretrained(f"{tmp}/reference")
        policy, reference = load_pretrained(f"{tmp}/policy"), load_pretrained(f"{tmp}/reference")

    bench_k_samples(policy, torch_policy, random_prompts(args.prompts, config.vocab_size),
                    args.samples, args.new_tokens, case="k_samples")
    keys = iter(range(100))

    # Geometric mixture.
    prompts = random_prompts(args.mixture_prompts, config.vocab_size, seed=1)
    new = args.mixture_new_tokens

    def ours_mixture():
        s = mixture_generate(policy, reference, 0.25, prompts, max_new_tokens=new,
                             key=jax.random.PRNGKey(next(keys)))
        assert s.lengths.min() == new

    generator = torch.Generator().manual_seed(0)

    def peer_mixture():
        for p in prompts:
            torch_mixture_no_cache(torch_policy, torch_reference, 0.25, p, new, generator)

    compile_s, ours_times = timings(ours_mixture, repeats=2)
    _, peer_times = timings(peer_mixture, repeats=1)
    tokens = len(prompts) * new
    ours_s, peer_s = min(ours_times), min(peer_times)
    emit(case="mixture", prompts=len(prompts), new_tokens=new, tokens_per_s=round(tokens / ours_s, 1),
         time_s=round(ours_s, 3), compile_s=round(compile_s, 2),
         peer="torch, both models, no KV cache (TRL GeometricMixtureWrapper)",
         peer_tokens_per_s=round(tokens / peer_s, 1), peer_time_s=round(peer_s, 3),
         ratio=round(peer_s / ours_s, 3), fraction_of_peak=None)


if __name__ == "__main__":
    main()
