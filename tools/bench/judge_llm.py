"""The LLM judge's cases of tools/bench/judge.py: K = 4 and K = 8 on long prompts (≥ 4× the
responses), one prompt (its K(K − 1) ordered pairs) per device call.

For each K it times, on the same token rows in the same run, in interleaved rounds (best of three;
compilation excluded, reported as compile_s): the judge with one shared prefill per prompt, the same
judge recomputing every pair from scratch, and transformers computing the same label logits from
scratch (the last token's hidden state through the LM head's two label rows; batches of the same
rows, right-padded with an attention mask).
`ratio` is the shared-prefill judge's pairs/s over transformers'; `shared_over_scratch` over its own
from-scratch path's. The model is --llm-model (an HF directory), or a random Llama of SmolLM2-135M's
widths with fewer layers over the synthetic task's word tokenizer.
"""

import tempfile

import jax
import numpy as np
import torch
import transformers

from common import emit, interleaved_timings
from nash_jax.judges.llm import LLMJudge
from nash_jax.tasks.synthetic import synthetic

PROMPT_WORDS, RESPONSE_WORDS = (160, 200), (24, 40)


def random_smollm2_shape(path, layers):
    """A random Llama with SmolLM2-135M's widths (576 hidden, 9 heads over 3 KV heads, 1536 MLP) and
    `layers` layers, over the synthetic task's tokenizer (labels: two of its words)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(synthetic.TOKENIZER_DIR)
    config = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=576, intermediate_size=1536,
                                      num_hidden_layers=layers, num_attention_heads=9,
                                      num_key_value_heads=3, head_dim=64, max_position_embeddings=2048,
                                      tie_word_embeddings=True)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return ("plain", "witty")


def torch_margins(model, rows, label_ids, per_call):
    """ℓ for token rows from scratch with transformers, `per_call` rows at a time."""
    out = np.empty(len(rows), np.float32)
    head = model.get_output_embeddings().weight[list(label_ids)]
    with torch.no_grad():
        for start in range(0, len(rows), per_call):
            chunk = rows[start:start + per_call]
            width = max(len(r) for r in chunk)
            ids = torch.zeros((len(chunk), width), dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for i, row in enumerate(chunk):
                ids[i, :len(row)], mask[i, :len(row)] = torch.tensor(row), 1
            hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
            last = hidden[torch.arange(len(chunk)), mask.sum(-1) - 1]
            logits = last @ head.T
            out[start:start + len(chunk)] = (logits[:, 0] - logits[:, 1]).float().numpy()
    return out


def bench_case(path, labels, k, prompts, dtype):
    rng = np.random.default_rng(k)
    words = [w for w in synthetic.WORDS if w != "."]

    def text(bounds):
        return " ".join(rng.choice(words, rng.integers(*bounds)))

    texts = [text(PROMPT_WORDS) for _ in range(prompts)]
    candidates = [[text(RESPONSE_WORDS) for _ in range(k)] for _ in texts]
    pairs = k * (k - 1)
    judge = LLMJudge.from_pretrained(path, labels=labels, batch_size=pairs, dtype=dtype)
    _, rows = judge.pair_rows(texts, candidates)
    tokens = judge.tokenizer
    prompt_tokens = np.mean([len(tokens(t, add_special_tokens=False)["input_ids"]) for t in texts])
    response_tokens = np.mean([len(tokens(c, add_special_tokens=False)["input_ids"])
                               for cs in candidates for c in cs])
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    flat = [row for prompt_rows in rows for row in prompt_rows]

    def margins(shared_prefill):
        judge.shared_prefill = shared_prefill
        return judge.margins(rows)

    timed = interleaved_timings({"shared": lambda: margins(True), "scratch": lambda: margins(False),
                                 "peer": lambda: torch_margins(model, flat, judge.labels, pairs)})
    shared, scratch = margins(True), margins(False)
    peer = torch_margins(model, flat, judge.labels, pairs).reshape(shared.shape)
    (shared_compile, shared_times), (scratch_compile, scratch_times), (_, peer_times) = timed.values()
    n = len(flat)
    shared_s, scratch_s, peer_s = min(shared_times), min(scratch_times), min(peer_times)
    emit(case=f"llm_judge_k{k}", model=str(path), dtype=dtype, prompts=prompts, candidates=k, pairs=n,
         mean_prompt_tokens=round(float(prompt_tokens), 1),
         mean_response_tokens=round(float(response_tokens), 1),
         mean_text_tokens=round(float(np.mean([len(r) for r in flat])), 1),
         pairs_per_s=round(n / shared_s, 3), time_s=round(shared_s, 3),
         compile_s=round(shared_compile - shared_s, 2),
         scratch_pairs_per_s=round(n / scratch_s, 3), scratch_time_s=round(scratch_s, 3),
         scratch_compile_s=round(scratch_compile - scratch_s, 2),
         shared_over_scratch=round(scratch_s / shared_s, 3),
         programs_compiled=judge.compiled_programs(),
         max_abs_margin_diff_shared_vs_scratch=float(np.abs(shared - scratch).max()),
         peer="torch transformers LlamaForCausalLM, every pair from scratch",
         peer_pairs_per_s=round(n / peer_s, 3), peer_time_s=round(peer_s, 3),
         ratio=round(peer_s / shared_s, 3),
         max_abs_margin_diff_vs_peer=float(np.abs(shared - peer).max()),
         devices=str(jax.devices()[0].platform), fraction_of_peak=None)


def bench_llm_judge(model_dir, *, layers, prompts, ks, dtype):
    with tempfile.TemporaryDirectory() as tmp:
        if model_dir:
            path, labels = model_dir, ("A", "B")
        else:
            path, labels = tmp, random_smollm2_shape(tmp, layers)
        for k in ks:
            bench_case(path, labels, k, prompts, dtype)
