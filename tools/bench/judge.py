"""Judges' K×K matrices, one JSON line per case.

pairrm: K = 5 candidates for 8 prompts (160 ordered pairs) on a PairRM-shaped DeBERTa scaled down to
6 layers × 512 hidden, with realistic lengths (sources of 60–120 words, responses of 100–250), against
transformers' PyTorch DebertaV2Model + the PairRM head running the same token rows in the same batches
in the same run. Tokenisation is done once, outside both timings.

llm (judge_llm.py): the LLM judge at K = 4 and K = 8 on long prompts (≥ 4× the responses): pairs/s
with one shared prefill per prompt against the same judge recomputing every pair from scratch, and
against transformers computing the same label logits from scratch.

    python tools/bench/judge.py [--case pairrm|llm|all] [--batch-size 16] [--prompts 8]
                                [--candidates 5] [--layers 6] [--hidden 512] [--dtype float32]
                                [--llm-model HF_DIR] [--llm-prompts 2]

Besides the speed it counts the programs compiled (the judge's own count and every XLA compile of the
process) and the padded tokens, for the judge's length buckets and for the powers of two (16 … 2048)
that PairRM used before, on the same rows.
"""

import argparse
import json
import tempfile
from pathlib import Path

import jax
import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from common import emit, timings
from nash_jax.judges.pairrm import LENGTH_BUCKETS, PairRM
from nash_jax.parallel.padding import bucket_size

MARKERS = ["<|source|>", "<|candidate1|>", "<|candidate2|>", "<|candidate|>"]
WORDS = [f"w{i}" for i in range(2000)]


POWERS_OF_TWO = tuple(2 ** i for i in range(4, 12))  # PairRM's widths before issue 16
COMPILES = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, seconds, **_: COMPILES.append(seconds)
    if event == "/jax/core/compile/backend_compile_duration" else None)


def padding_plan(rows, batch_size, buckets):
    """(widths compiled, padded tokens / real tokens) when sorted rows are cut into batches."""
    lengths = np.sort([len(r) for r in rows], kind="stable")
    widths, padded = set(), 0
    for start in range(0, len(lengths), batch_size):
        width = bucket_size(int(lengths[start:start + batch_size].max()), buckets)
        widths.add(width)
        padded += width * batch_size
    return sorted(widths), round(padded / lengths.sum(), 3)


def build(path, layers=6, hidden=512):
    """A PairRM directory: word-level tokenizer, layers × hidden DeBERTa with PairRM's position table."""
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
    config = transformers.DebertaV2Config(
        vocab_size=len(fast), hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=hidden // 64, intermediate_size=4 * hidden, max_position_embeddings=512, relative_attention=True,
        position_buckets=256, max_relative_positions=-1, pos_att_type=["p2c", "c2p"],
        share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False,
        type_vocab_size=0, layer_norm_eps=1e-7, hidden_act="gelu")
    torch.manual_seed(0)
    encoder = transformers.DebertaV2Model(config).eval()
    head = torch.nn.Sequential(torch.nn.Dropout(0.05), torch.nn.Linear(2 * hidden, hidden),
                               torch.nn.Tanh(), torch.nn.Dropout(0.05), torch.nn.Linear(hidden, 1)).eval()
    tensors = {f"pretrained_model.{k}": v.contiguous() for k, v in encoder.state_dict().items()}
    tensors.update({f"head_layer.{k}": v.contiguous() for k, v in head.state_dict().items()})
    save_file(tensors, f"{path}/model.safetensors", metadata={"format": "pt"})
    hf = config.to_dict()
    hf.update(source_prefix_id=len(fast) - 4, cand1_prefix_id=len(fast) - 3,
              cand2_prefix_id=len(fast) - 2, cand_prefix_id=len(fast) - 1)
    Path(path, "config.json").write_text(json.dumps(hf))
    return encoder, head


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", choices=["pairrm", "llm", "all"], default="all")
    parser.add_argument("--llm-model", help="an HF decoder directory for the LLM-judge cases (default: a "
                                            "random SmolLM2-shaped Llama of --llm-layers layers)")
    parser.add_argument("--llm-layers", type=int, default=4)
    parser.add_argument("--llm-prompts", type=int, default=2)
    parser.add_argument("--llm-k", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--candidates", type=int, default=5)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args()
    if args.case in ("llm", "all"):
        from judge_llm import bench_llm_judge

        bench_llm_judge(args.llm_model, layers=args.llm_layers, prompts=args.llm_prompts,
                        ks=args.llm_k, dtype=args.dtype)
    if args.case in ("pairrm", "all"):
        bench_pairrm(args)


def bench_pairrm(args):
    rng = np.random.default_rng(0)

    def text(lo, hi):
        return " ".join(rng.choice(WORDS, rng.integers(lo, hi)))

    prompts = [text(60, 120) for _ in range(args.prompts)]
    candidates = [[text(100, 250) for _ in range(args.candidates)] for _ in prompts]
    k = args.candidates
    with tempfile.TemporaryDirectory() as tmp:
        encoder, head = build(tmp, args.layers, args.hidden)
        judge = PairRM.from_pretrained(tmp, batch_size=args.batch_size, dtype=args.dtype)
    pairs = [(b, candidates[b][i], candidates[b][j])
             for b in range(len(prompts)) for i in range(k) for j in range(k) if i != j]
    rows, markers = judge._rows(prompts, pairs)
    order = np.argsort([len(r) for r in rows])

    def peer():
        out = np.empty(len(rows), np.float32)
        with torch.no_grad():
            for start in range(0, len(rows), args.batch_size):
                chunk = order[start:start + args.batch_size]
                width = max(len(rows[i]) for i in chunk)
                ids = torch.zeros((len(chunk), width), dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for slot, i in enumerate(chunk):
                    ids[slot, :len(rows[i])] = torch.tensor(rows[i])
                    mask[slot, :len(rows[i])] = 1
                hidden = encoder(ids, attention_mask=mask).last_hidden_state
                at = hidden[torch.arange(len(chunk))[:, None], torch.from_numpy(markers[chunk]).long()]
                left = head(torch.cat([at[:, 0], at[:, 1]], -1))[:, 0]
                right = head(torch.cat([at[:, 0], at[:, 2]], -1))[:, 0]
                out[chunk] = (left - right).numpy()
        return out

    compiles_before = len(COMPILES)
    compile_s, ours_times = timings(lambda: judge.run_rows(rows, markers), repeats=2)
    xla_compiles = len(COMPILES) - compiles_before
    diff = float(np.max(np.abs(judge.run_rows(rows, markers) - peer())))
    _, peer_times = timings(peer, repeats=2)
    ours_s, peer_s = min(ours_times), min(peer_times)
    widths, padded = padding_plan(rows, judge.batch_size, LENGTH_BUCKETS)
    old_widths, old_padded = padding_plan(rows, judge.batch_size, POWERS_OF_TWO)
    emit(case=f"pairrm_prob_matrix_k{k}", layers=args.layers, hidden=args.hidden, dtype=args.dtype,
         prompts=len(prompts), candidates=k, pairs=len(rows),
         programs_compiled=judge.compiled_programs(), xla_compiles_first_call=xla_compiles,
         widths=widths, padded_over_real_tokens=padded, pow2_widths=old_widths,
         pow2_padded_over_real_tokens=old_padded,
         mean_row_tokens=round(float(np.mean([len(r) for r in rows])), 1),
         pairs_per_s=round(len(rows) / ours_s, 2), time_s=round(ours_s, 3),
         compile_s=round(compile_s, 2), peer="torch transformers DebertaV2Model + PairRM head",
         peer_pairs_per_s=round(len(rows) / peer_s, 2), peer_time_s=round(peer_s, 3),
         ratio=round(peer_s / ours_s, 3), max_abs_logit_diff_vs_peer=diff, fraction_of_peak=None)


if __name__ == "__main__":
    main()
