"""Forward+backward of a ~25M-parameter Llama: nash_jax against the same model in PyTorch transformers,
on the same weights and tokens, in the same process.

    python tools/bench/model_step.py [--batch 8] [--length 256] [--repeats 3]

Prints one JSON line per case: tokens/s for both, the ratio (>1: nash_jax faster), and the achieved
FLOP/s as a fraction of the fp32 matmul peak that this script measures with JAX first.
"""

import argparse
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers
from flax import nnx

from common import emit, time_call, timings
from nash_jax.core.losses import sequence_logprobs
from nash_jax.models import load_pretrained

MODEL = dict(vocab_size=8192, hidden_size=512, intermediate_size=1408, num_hidden_layers=6,
             num_attention_heads=8, num_key_value_heads=4, head_dim=64, max_position_embeddings=1024)


def matmul_peak_flops(n=2048, repeats=5):
    """fp32 FLOP/s of one large jitted matmul: the peak the model step is measured against."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    mm = jax.jit(jnp.matmul)
    _, seconds = timings(lambda: jax.block_until_ready(mm(a, b)), repeats=repeats)
    return 2 * n**3 / min(seconds)  # the best run: a peak, not a typical


def step_flops(config, batch, length):
    """Matmul FLOPs of one forward+backward (backward = 2× forward), attention scores included."""
    c = config
    attn = c.hidden_size * (c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim \
        + c.num_attention_heads * c.head_dim * c.hidden_size
    mlp = 3 * c.hidden_size * c.intermediate_size
    per_token = 2 * (c.num_hidden_layers * (attn + mlp) + c.vocab_size * c.hidden_size)
    per_token += c.num_hidden_layers * 4 * length * c.num_attention_heads * c.head_dim  # QKᵀ and PV
    return 3 * per_token * batch * length


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    b, t = args.batch, args.length

    peak = matmul_peak_flops()
    config = transformers.LlamaConfig(**MODEL)
    torch.manual_seed(0)
    torch_model = transformers.LlamaForCausalLM(config)
    params = sum(p.numel() for p in torch_model.parameters())
    tokens_np = np.random.default_rng(0).integers(0, config.vocab_size, (b, t))
    mask_np = np.ones((b, t), bool)
    mask_np[:, 0] = False  # the first token has no prediction

    with tempfile.TemporaryDirectory() as tmp:
        torch_model.save_pretrained(tmp)
        model = load_pretrained(tmp)
    graphdef, weights, rest = nnx.split(model, nnx.Param, ...)
    tokens, mask = jnp.asarray(tokens_np), jnp.asarray(mask_np)

    @jax.jit
    def value_and_grad(weights):
        def loss(w):
            logits, _ = nnx.merge(graphdef, w, rest)(tokens[:, :-1])
            return -jnp.mean(sequence_logprobs(logits, tokens[:, 1:], mask[:, 1:]))
        return jax.value_and_grad(loss)(weights)

    t_tokens = torch.from_numpy(tokens_np)

    def torch_value_and_grad():
        torch_model.zero_grad(set_to_none=True)
        logits = torch_model(t_tokens[:, :-1]).logits
        logp = torch.gather(logits.log_softmax(-1), 2, t_tokens[:, 1:, None]).squeeze(2)
        loss = -logp.sum(-1).mean()
        loss.backward()
        return loss

    ours_loss = float(value_and_grad(weights)[0])
    peer_loss = float(torch_value_and_grad())
    compile_s, ours_s = time_call(lambda: jax.block_until_ready(value_and_grad(weights)),
                                  repeats=args.repeats)
    _, peer_s = time_call(torch_value_and_grad, repeats=args.repeats)
    n_tokens = b * (t - 1)
    flops = step_flops(config, b, t - 1)
    emit(case="llama25m_forward_backward", params=params, batch=b, length=t,
         tokens_per_s=round(n_tokens / ours_s, 1), time_s=round(ours_s, 4), compile_s=round(compile_s, 2),
         peer="torch transformers LlamaForCausalLM", peer_tokens_per_s=round(n_tokens / peer_s, 1),
         peer_time_s=round(peer_s, 4), ratio=round(peer_s / ours_s, 3),
         achieved_gflop_per_s=round(flops / ours_s / 1e9, 2),
         peer_achieved_gflop_per_s=round(flops / peer_s / 1e9, 2),
         matmul_peak_gflop_per_s=round(peak / 1e9, 2),
         fraction_of_peak=round(flops / ours_s / peak, 3),
         loss_diff_vs_peer=abs(ours_loss - peer_loss), torch_threads=torch.get_num_threads(),
         cpu_count=os.cpu_count(), jax_backend=jax.default_backend())


if __name__ == "__main__":
    main()
