"""Side by side on one GPU: nash_jax against PyTorch on the same device, weights and inputs; the
harness behind the H200 figures of the scale issue (meant for a GPU; `--tiny` runs toy sizes on CPU to
check the code paths before spending device time).

    python tools/bench/gpu.py [--tiny] [--cases sppo_step_1b sample_1b pairrm sppo_step_8b sample_8b]

Each side of each case runs in its own subprocess (JAX and torch must not share the GPU's memory, and
each peak is its own); the parent prints one JSON line per case: our figure, the peer's, `ratio` (ours
over the peer's speed, >1 is faster), `fraction_of_peak` against the bf16 matmul FLOP/s measured here
with JAX for the compute-bound steps, and the first call (compilation) as `compile_s`.

Cases (full sizes):
  sppo_step_1b   SPPO step, Llama-3.2-1B shape, bf16, AdamW, B 8 × T 1024 (peer: transformers + SDPA)
  sample_1b      K = 5 samples × 32 prompts × 256 new tokens (peer: HF generate)
  pairrm         PairRM-large shape, K = 5 matrices for 16 prompts, bf16 (peer: DebertaV2Model + head)
  sppo_step_8b   SPPO step, Llama-3-8B shape, B 4 × T 1024, per-layer remat on both sides
  sample_8b      K = 5 × 16 prompts × 128 new tokens, 8B shape
Weights are random (initialised in memory or written once to a temporary HF directory).
"""

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import time_call

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
CASES = ("sppo_step_1b", "sample_1b", "pairrm", "sppo_step_8b", "sample_8b")

LLAMA_1B = dict(model_type="llama", vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                max_position_embeddings=4096, tie_word_embeddings=True, rope_theta=500000.0,
                rms_norm_eps=1e-5)
LLAMA_8B = dict(model_type="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5,
                tie_word_embeddings=False)
LLAMA_TINY = dict(model_type="llama", vocab_size=512, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  max_position_embeddings=512, tie_word_embeddings=True, rms_norm_eps=1e-5)
DEBERTA_LARGE = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                     intermediate_size=4096)
DEBERTA_TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)


def sizes(case, tiny):
    """(model config.json dict, batch or (prompts, K, new tokens), remat) of a case."""
    model = LLAMA_TINY if tiny else (LLAMA_8B if case.endswith("8b") else LLAMA_1B)
    if case.startswith("sppo_step"):
        shape = (2, 32) if tiny else ((4, 1024) if case.endswith("8b") else (8, 1024))
    else:
        shape = (2, 2, 8) if tiny else ((16, 5, 128) if case.endswith("8b") else (32, 5, 256))
    return model, shape, case.endswith("8b")


def train_flops(hf, b, t):
    """Useful matmul FLOPs of forward + backward (remat recomputation not counted)."""
    attn = hf["hidden_size"] * (hf["num_attention_heads"] + 2 * hf["num_key_value_heads"]) * \
        hf["head_dim"] + hf["num_attention_heads"] * hf["head_dim"] * hf["hidden_size"]
    per_token = 2 * (hf["num_hidden_layers"] * (attn + 3 * hf["hidden_size"] * hf["intermediate_size"])
                     + hf["vocab_size"] * hf["hidden_size"])
    per_token += hf["num_hidden_layers"] * 2 * t * hf["num_attention_heads"] * hf["head_dim"]
    return 3 * per_token * b * t


def bf16_matmul_peak(tiny):
    import jax
    import jax.numpy as jnp
    n = 256 if tiny else 8192
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.bfloat16)
    mm = jax.jit(jnp.matmul)
    jax.block_until_ready(mm(a, a))
    best = min(time_call(lambda: jax.block_until_ready(mm(a, a)), repeats=5)[1] for _ in range(1))
    return 2 * n**3 / best


def torch_device():
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


# ---------------------------------------------------------------------------------------------------
# one side of one case (a child process): prints one JSON line

def sppo_batch(hf, b, t):
    import numpy as np
    rng = np.random.default_rng(0)
    loss_mask = np.zeros((b, t), bool)
    loss_mask[:, t // 4:] = True  # a quarter prompt, the rest response
    return {"tokens": rng.integers(0, hf["vocab_size"], (b, t)),
            "segment_ids": np.ones((b, t), np.int32), "loss_mask": loss_mask,
            "win_rate": rng.uniform(size=b).astype(np.float32),
            "anchor_logp": rng.normal(size=b).astype(np.float32) - 1000.0}


def jax_llama(hf, remat):
    from flax import nnx
    from nash_jax.models.hf import config_from_hf
    from nash_jax.models.llama import Llama
    config = config_from_hf(hf, dtype="bfloat16", param_dtype="bfloat16")
    return Llama(dataclasses.replace(config, remat=remat), rngs=nnx.Rngs(0))


def torch_llama(hf, remat):
    import torch
    import transformers
    config = transformers.LlamaConfig(**{k: v for k, v in hf.items() if k != "model_type"})
    config._attn_implementation = "sdpa"
    dev = torch_device()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(dev):
        model = transformers.LlamaForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    if remat:
        model.gradient_checkpointing_enable()
    return model, dev


def step_jax(hf, shape, remat, tiny):
    import jax
    from nash_jax import parallel
    from nash_jax.config import OptimizerConfig
    from nash_jax.train import init_train_state, make_optimizer, make_step
    b, t = shape
    mesh = parallel.make_mesh(devices=jax.devices()[:1])
    tx, schedule = make_optimizer(OptimizerConfig(name="adamw", learning_rate=5e-7, schedule="constant",
                                                  warmup_ratio=0.0, clip_norm=1.0), 1000)
    model_def, state, shardings = init_train_state(jax_llama(hf, remat), tx, mesh=mesh)
    step = make_step("sppo", model_def, tx, schedule, shardings, mesh, eta=1e3)
    placed = step.place(sppo_batch(hf, b, t))
    holder = {"state": state}

    def one():
        holder["state"], metrics = step.jitted(holder["state"], placed)
        float(metrics["loss"])

    first, median = time_call(one, repeats=3)
    peak = (jax.devices()[0].memory_stats() or {}).get("peak_bytes_in_use", 0)
    return {"first_s": first, "time_s": median, "peak_gib": peak / 2**30,
            "matmul_peak_flop_per_s": bf16_matmul_peak(tiny)}


def step_torch(hf, shape, remat, tiny):
    import torch
    b, t = shape
    model, dev = torch_llama(hf, remat)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-7, weight_decay=0.0)
    batch = sppo_batch(hf, b, t)
    tokens = torch.from_numpy(batch["tokens"]).to(dev)
    mask = torch.from_numpy(batch["loss_mask"][:, 1:]).float().to(dev)
    win = torch.from_numpy(batch["win_rate"]).to(dev)
    anchor = torch.from_numpy(batch["anchor_logp"]).to(dev)

    def one():
        opt.zero_grad(set_to_none=True)
        logits = model(tokens[:, :-1]).logits.float()
        logp = torch.gather(logits.log_softmax(-1), 2, tokens[:, 1:, None]).squeeze(2)
        loss = (((logp * mask).sum(-1) - anchor - 1e3 * (win - 0.5)) ** 2).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        float(loss.detach())

    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    first, median = time_call(one, repeats=3)
    peak = torch.cuda.max_memory_allocated() if dev == "cuda" else 0
    return {"first_s": first, "time_s": median, "peak_gib": peak / 2**30}


def prompts_of(hf, n):
    import numpy as np
    rng = np.random.default_rng(0)
    lo, hi = (4, 8) if hf is LLAMA_TINY else (96, 160)
    return [list(map(int, rng.integers(1, hf["vocab_size"], rng.integers(lo, hi)))) for _ in range(n)]


def sample_jax(hf, shape, remat, tiny):
    import jax
    import numpy as np
    from nash_jax.rollout.sampling import generate
    n, k, new = shape
    model = jax_llama(hf, False)
    prompts = prompts_of(hf, n)
    key = {"k": jax.random.key(0)}

    def one():
        key["k"], sub = jax.random.split(key["k"])
        samples = generate(model, prompts, num_samples=k, max_new_tokens=new, temperature=1.0, key=sub)
        assert int(np.asarray(samples.lengths).min()) == new, "every row must run the full length"

    first, median = time_call(one, repeats=2)
    return {"first_s": first, "time_s": median}


def sample_torch(hf, shape, remat, tiny):
    import torch
    n, k, new = shape
    model, dev = torch_llama(hf, False)
    model.eval()
    prompts = prompts_of(hf, n)
    width = max(map(len, prompts))
    ids = torch.zeros((n, width), dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    for i, p in enumerate(prompts):  # left padding
        ids[i, width - len(p):] = torch.tensor(p)
        attention[i, width - len(p):] = 1
    ids, attention = ids.to(dev), attention.to(dev)

    def one():
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=attention, do_sample=True,
                                 temperature=1.0, top_p=1.0, top_k=0, num_return_sequences=k,
                                 max_new_tokens=new, min_new_tokens=new, pad_token_id=0,
                                 eos_token_id=None)
        assert out.shape[1] == width + new
        if dev == "cuda":
            torch.cuda.synchronize()

    first, median = time_call(one, repeats=2)
    return {"first_s": first, "time_s": median}


MARKERS = ["<|source|>", "<|candidate1|>", "<|candidate2|>", "<|candidate|>"]
WORDS = [f"w{i}" for i in range(2000)]


def write_pairrm(path, tiny):
    """A random PairRM directory (DeBERTa-v3 + pairwise head, a word-level tokenizer with the markers)."""
    import torch
    import transformers
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    vocab = {t: i for i, t in enumerate(["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                       special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]",
                                                cls_token="[CLS]", sep_token="[SEP]",
                                                unk_token="[UNK]", mask_token="[MASK]")
    fast.add_tokens(MARKERS)
    fast.save_pretrained(path)
    size = DEBERTA_TINY if tiny else DEBERTA_LARGE
    config = transformers.DebertaV2Config(
        vocab_size=len(fast), max_position_embeddings=512, relative_attention=True,
        position_buckets=256, max_relative_positions=-1, pos_att_type=["p2c", "c2p"],
        share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False,
        type_vocab_size=0, layer_norm_eps=1e-7, hidden_act="gelu", **size)
    torch.manual_seed(0)
    encoder = transformers.DebertaV2Model(config).eval()
    h = size["hidden_size"]
    head = torch.nn.Sequential(torch.nn.Dropout(0.05), torch.nn.Linear(2 * h, h), torch.nn.Tanh(),
                               torch.nn.Dropout(0.05), torch.nn.Linear(h, 1)).eval()
    tensors = {f"pretrained_model.{k}": v.contiguous() for k, v in encoder.state_dict().items()}
    tensors.update({f"head_layer.{k}": v.contiguous() for k, v in head.state_dict().items()})
    save_file(tensors, f"{path}/model.safetensors", metadata={"format": "pt"})
    hf = config.to_dict()
    hf.update(source_prefix_id=len(fast) - 4, cand1_prefix_id=len(fast) - 3,
              cand2_prefix_id=len(fast) - 2, cand_prefix_id=len(fast) - 1)
    Path(path, "config.json").write_text(json.dumps(hf))
    return encoder, head


def judge_texts(n, k, tiny):
    import numpy as np
    rng = np.random.default_rng(0)
    scale = 10 if tiny else 1

    def text(lo, hi):
        return " ".join(rng.choice(WORDS, rng.integers(lo // scale, hi // scale)))
    prompts = [text(60, 120) for _ in range(n)]
    return prompts, [[text(100, 250) for _ in range(k)] for _ in prompts]


def pairrm_both(tiny):
    """Both sides in one process: the peer runs the same rows (our tokenisation) through torch."""
    import numpy as np
    import torch
    from nash_jax.judges.pairrm import PairRM
    n, k, batch = (2, 3, 4) if tiny else (16, 5, 32)
    dev = torch_device()
    with tempfile.TemporaryDirectory() as path:
        encoder, head = write_pairrm(path, tiny)
        prompts, candidates = judge_texts(n, k, tiny)
        judge = PairRM.from_pretrained(path, batch_size=batch, dtype="bfloat16")
        first, ours = time_call(lambda: judge.prob_matrix(prompts, candidates), repeats=2)
        pairs = [(b, candidates[b][i], candidates[b][j]) for b in range(n) for i in range(k)
                 for j in range(k) if i != j]
        rows, markers = judge._rows(prompts, pairs)
    order = np.argsort([len(r) for r in rows])
    encoder, head = encoder.to(dev, torch.bfloat16), head.to(dev, torch.bfloat16)

    def peer():
        out = np.empty(len(rows), np.float32)
        with torch.no_grad():
            for start in range(0, len(rows), batch):
                chunk = order[start:start + batch]
                width = max(len(rows[i]) for i in chunk)
                ids = torch.zeros((len(chunk), width), dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for slot, i in enumerate(chunk):
                    ids[slot, :len(rows[i])] = torch.tensor(rows[i])
                    mask[slot, :len(rows[i])] = 1
                hidden = encoder(ids.to(dev), attention_mask=mask.to(dev)).last_hidden_state
                at = hidden[torch.arange(len(chunk), device=dev)[:, None],
                            torch.from_numpy(np.asarray(markers)[chunk]).long().to(dev)]
                left = head(torch.cat([at[:, 0], at[:, 1]], -1))[:, 0]
                right = head(torch.cat([at[:, 0], at[:, 2]], -1))[:, 0]
                out[chunk] = (left - right).float().cpu().numpy()
        return out

    _, theirs = time_call(peer, repeats=2)
    return {"prompts": n, "candidates": k, "batch": batch, "pairs": len(rows),
            "mean_row_tokens": round(float(np.mean([len(r) for r in rows])), 1),
            "compile_s": round(first - ours, 2), "time_s": round(ours, 3),
            "pairs_per_s": round(len(rows) / ours, 1),
            "peer": "torch transformers DebertaV2Model + PairRM head (bf16, same device)",
            "peer_time_s": round(theirs, 3), "peer_pairs_per_s": round(len(rows) / theirs, 1),
            "ratio": round(theirs / ours, 3)}


SIDES = {("sppo_step", "jax"): step_jax, ("sppo_step", "torch"): step_torch,
         ("sample", "jax"): sample_jax, ("sample", "torch"): sample_torch}


def child(case, side, tiny):
    if case == "pairrm":
        print(json.dumps(pairrm_both(tiny)), flush=True)
        return
    hf, shape, remat = sizes(case, tiny)
    fn = SIDES[(case.rsplit("_", 1)[0], side)]
    print(json.dumps(fn(hf, shape, remat, tiny)), flush=True)


# ---------------------------------------------------------------------------------------------------
# the parent: runs the sides, prints one line per case

def run_child(case, side, tiny, timeout):
    command = [sys.executable, __file__, "--child", case, side] + (["--tiny"] if tiny else [])
    out = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                         cwd=Path(__file__).parent)
    if out.returncode:
        raise RuntimeError(f"{case} ({side}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(case, tiny, timeout):
    tag = "_tiny" if tiny else ""
    if case == "pairrm":
        return {"case": f"pairrm_prob_matrix_bf16{tag}", **run_child(case, "both", tiny, timeout)}
    hf, shape, remat = sizes(case, tiny)
    ours, peer = run_child(case, "jax", tiny, timeout), run_child(case, "torch", tiny, timeout)
    if case.startswith("sppo_step"):
        b, t = shape
        tokens, flops = b * (t - 1), train_flops(hf, b, t - 1)
        achieved = flops / ours["time_s"]
        return {"case": f"{case}{tag}", "batch": b, "length": t, "remat": remat,
                "tokens_per_s": round(tokens / ours["time_s"], 1), "time_s": round(ours["time_s"], 4),
                "compile_s": round(ours["first_s"] - ours["time_s"], 2),
                "tflop_per_s": round(achieved / 1e12, 2), "peak_gib": round(ours["peak_gib"], 2),
                "peer": "torch transformers (SDPA) + AdamW, same device",
                "peer_tokens_per_s": round(tokens / peer["time_s"], 1),
                "peer_time_s": round(peer["time_s"], 4), "peer_peak_gib": round(peer["peak_gib"], 2),
                "ratio": round(peer["time_s"] / ours["time_s"], 3),
                "bf16_matmul_peak_tflop_per_s": round(ours["matmul_peak_flop_per_s"] / 1e12, 2),
                "fraction_of_peak": round(achieved / ours["matmul_peak_flop_per_s"], 3)}
    n, k, new = shape
    tokens = n * k * new
    return {"case": f"{case}{tag}", "prompts": n, "samples": k, "new_tokens": new,
            "tokens_per_s": round(tokens / ours["time_s"], 1), "time_s": round(ours["time_s"], 3),
            "compile_s": round(ours["first_s"] - ours["time_s"], 2),
            "peer": "transformers generate (SDPA), same device",
            "peer_tokens_per_s": round(tokens / peer["time_s"], 1),
            "peer_time_s": round(peer["time_s"], 3), "ratio": round(peer["time_s"] / ours["time_s"], 3)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="toy sizes (runs on CPU)")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per side of a case")
    parser.add_argument("--child", nargs=2, metavar=("CASE", "SIDE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(*args.child, args.tiny)
    for case in args.cases:
        print(json.dumps(report(case, args.tiny, args.timeout)), flush=True)


if __name__ == "__main__":
    main()
