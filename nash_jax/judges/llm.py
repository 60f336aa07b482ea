"""An LLM judge in the same program as the policy: a decoder asked which of two responses is better,
in both orders, with one prefill per prompt.

The question is `template` (with {prompt}, {a} and {b}) sent as one user message through the judge's
chat template with the generation prompt (the raw text for a tokenizer without one). With
ℓ(a, b) = logit(label A) − logit(label B) at the end of that text when a is shown first,

    P(i ≻ j) = σ((ℓ(y_i, y_j) − ℓ(y_j, y_i)) / 2)

so P + Pᵀ = 1 exactly (P[j, i] is set to 1 − P[i, j]) and a constant position bias cancels. The share
of pairs whose two orders disagree (ℓ(y_i, y_j) and ℓ(y_j, y_i) of the same sign: the judge preferred
the same slot both times) is recorded per prompt as `position_inconsistency`.

One prefill per prompt: the K(K − 1) texts of a prompt are tokenised whole and their longest common
token prefix (the template's head and the prompt, up to the first response) is computed once; each
ordered pair continues it with the rest of its text, attending to the head's keys in place
(models.attention.prefix_attention: one matmul per prompt against its head, no copy of its cache per
pair), and only the two label logits at its last token are read. Tokenising whole texts keeps every
row exactly the text's own tokenisation (a token merged across the head/response boundary simply
shortens the shared prefix). Widths and batch sizes are bucketed, so the same programs serve every
call with the same K.
"""

import logging
import string

import jax.numpy as jnp
import numpy as np
from scipy.special import expit

from nash_jax.core.losses import logits_from_hidden
from nash_jax.judges.base import PreferenceModel
from nash_jax.judges.on_mesh import MIN_WIDTH, OnMesh
from nash_jax.models.llama import KVCache, positions_from_segments
from nash_jax.models.tokenizer import load_tokenizer
from nash_jax.parallel.padding import bucket_size, right_pad

log = logging.getLogger(__name__)

DEFAULT_TEMPLATE = (
    "Which response answers the prompt better? Judge helpfulness, correctness and clarity.\n\n"
    "Prompt:\n{prompt}\n\nResponse A:\n{a}\n\nResponse B:\n{b}\n\n"
    "Answer with a single letter, A or B.")
FIELDS = ("prompt", "a", "b")


def check_template(template, key="judge.template"):
    """A template with exactly the fields {prompt}, {a} and {b} (literal braces doubled)."""
    try:
        names = [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
    except ValueError as err:
        raise ValueError(f"{key}: not a format string ({err}); expected {{prompt}}, {{a}} and {{b}}, "
                         "literal braces doubled") from None
    missing = [f"{{{name}}}" for name in FIELDS if name not in names]
    unknown = sorted(set(names) - set(FIELDS))
    if missing or unknown:
        raise ValueError(f"{key}: " + (f"lacks {', '.join(missing)}" if missing else "")
                         + ("; " if missing and unknown else "")
                         + (f"has unknown fields {unknown}" if unknown else "")
                         + "; expected a question with {prompt}, {a} and {b} (literal braces doubled)")


def label_ids(tokenizer, labels):
    """The first token of each label's encoding without special tokens; distinct, or an error."""
    if len(labels) != 2:
        raise ValueError(f"judge.labels={list(labels)}; expected two labels")
    ids = []
    for label in labels:
        encoded = tokenizer(label, add_special_tokens=False)["input_ids"]
        if not encoded:
            raise ValueError(f"judge.labels: {label!r} encodes to no token")
        ids.append(int(encoded[0]))
    if ids[0] == ids[1]:
        raise ValueError(f"judge.labels={list(labels)} both start with token {ids[0]} "
                         f"({tokenizer.convert_ids_to_tokens(ids[0])!r}); expected labels whose first "
                         "tokens differ")
    return tuple(ids)


def label_margins(model, hidden, last, labels):
    """ℓ [N] fp32: logit(labels[0]) − logit(labels[1]) at position last [N] of hidden [N, T, E],
    computed as the model's own head computes those two logits."""
    at = jnp.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0]
    head = model.unembedding()[jnp.asarray(labels)]
    logits = logits_from_hidden(at, head, model.config.final_logit_softcap)
    return logits[:, 0] - logits[:, 1]


def shared_prefill_margins(model, heads, head_segments, rests, rest_segments, last, labels):
    """ℓ for rows [N, R] continuing prompt heads [B, H] (left-padded; N = B · pairs per prompt,
    prompt-major; rests right-padded): each head prefilled once, and its rows attend to its keys in
    place (no copy of the head's cache per pair)."""
    batch, width = heads.shape
    rows, rest_width = rests.shape
    _, prefix = model.hidden_states(heads, positions_from_segments(head_segments), head_segments,
                                    KVCache.create(model.config, batch, width))
    per_prompt = rows // batch
    head_lengths = jnp.repeat(jnp.sum(head_segments, axis=-1), per_prompt)
    positions = head_lengths[:, None] + jnp.arange(rest_width)[None, :]
    hidden, _ = model.hidden_states(rests, positions, rest_segments, prefix=prefix)
    return label_margins(model, hidden, last, labels)


def from_scratch_margins(model, tokens, segments, last, labels):
    """ℓ for whole texts [N, T] (right-padded), every row computed on its own."""
    hidden, _ = model.hidden_states(tokens, None, segments)
    return label_margins(model, hidden, last, labels)


def common_prefix(rows):
    """Length of the longest common prefix of token lists, leaving each row at least one token."""
    first = rows[0]
    n = min(len(r) for r in rows) - 1
    for row in rows[1:]:
        n = next((i for i in range(n) if row[i] != first[i]), n)
    return max(n, 0)


class LLMJudge(PreferenceModel):
    """A decoder (nash_jax.models) with its tokenizer as a pairwise judge; see the module docstring.

    batch_size: the most ordered pairs per device call, in whole prompts (on_mesh.per_call: at least
    one prompt's K(K − 1) per data shard, whatever batch_size says); shared_prefill=False
    recomputes every pair's text from scratch (the same logits, for comparison)."""

    def __init__(self, model, tokenizer, *, template=DEFAULT_TEMPLATE, labels=("A", "B"),
                 max_tokens=4096, mesh=None, batch_size=16, shared_prefill=True):
        check_template(template)
        self.template, self.tokenizer, self.max_tokens = template, tokenizer, max_tokens
        self.labels = label_ids(tokenizer, labels)
        self.on_mesh = OnMesh(model, mesh)
        self.batch_size, self.shared_prefill = batch_size, shared_prefill
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.config = model.config
        labels = self.labels
        # This judge's own jitted programs: their caches hold exactly what this judge compiled.
        self._shared = self.on_mesh.jit(lambda model, *rows: shared_prefill_margins(model, *rows, labels))
        self._scratch = self.on_mesh.jit(lambda model, *rows: from_scratch_margins(model, *rows, labels))
        self.pairs_computed = 0

    @classmethod
    def from_pretrained(cls, path, *, mesh=None, dtype="float32", **kwargs):
        """The judge from a local decoder directory (config.json, safetensors, tokenizer)."""
        from nash_jax.models import hf

        model = hf.load_pretrained(path, mesh=mesh, dtype=dtype)
        return cls(model, load_tokenizer(path), mesh=mesh, **kwargs)

    def compiled_programs(self):
        """How many programs this judge has compiled (one per bucketed shape it has met)."""
        return self._shared._cache_size() + self._scratch._cache_size()

    def text(self, prompt, a, b):
        """The judge's whole input for (prompt, a shown first, b second), chat template applied."""
        question = self.template.format(prompt=prompt, a=a, b=b)
        if not getattr(self.tokenizer, "chat_template", None):
            return question
        return self.tokenizer.apply_chat_template([{"role": "user", "content": question}],
                                                  tokenize=False, add_generation_prompt=True)

    def encode(self, texts):
        """Token lists as the judge reads its texts (special tokens only where there is no chat
        template: a chat template writes its own)."""
        special = not getattr(self.tokenizer, "chat_template", None)
        return self.tokenizer(texts, add_special_tokens=special)["input_ids"]

    def pair_rows(self, prompts, candidates):
        """Per prompt, the token lists of its ordered pairs (i, j), i ≠ j, in row-major order; a text
        longer than max_tokens is an error here, before any device call."""
        k = len(candidates[0])
        pairs = [(i, j) for i in range(k) for j in range(k) if i != j]
        out = []
        for b, (prompt, cands) in enumerate(zip(prompts, candidates)):
            rows = self.encode([self.text(prompt, cands[i], cands[j]) for i, j in pairs])
            for (i, j), row in zip(pairs, rows):
                if len(row) > self.max_tokens:
                    raise ValueError(f"the LLM judge's text for prompt {b}, responses {i} and {j} has "
                                     f"{len(row)} tokens; judge.max_tokens={self.max_tokens} (raise it, "
                                     "or shorten prompts and responses)")
            out.append(rows)
        return pairs, out

    def margins(self, rows_per_prompt):
        """ℓ [B, pairs] for each prompt's pair token lists, in device calls of whole prompts."""
        per_prompt = len(rows_per_prompt[0])
        prompts_per_call = self.on_mesh.per_call(self.batch_size, per_prompt)
        out = np.zeros((len(rows_per_prompt), per_prompt), np.float32)
        for start in range(0, len(rows_per_prompt), prompts_per_call):
            chunk = rows_per_prompt[start:start + prompts_per_call]
            chunk = chunk + [[[self.pad_id, self.pad_id]] * per_prompt] * (prompts_per_call - len(chunk))
            run = self._run_shared if self.shared_prefill else self._run_scratch
            values = run(chunk).reshape(prompts_per_call, per_prompt)
            out[start:start + prompts_per_call] = values[:len(out) - start]
        self.pairs_computed += len(rows_per_prompt) * per_prompt
        return out

    def _run_shared(self, chunk):
        prefixes = [common_prefix(rows) for rows in chunk]
        head_width = bucket_size(max(1, *prefixes), minimum=MIN_WIDTH, what="LLM judge head length")
        rests = [row[n:] for rows, n in zip(chunk, prefixes) for row in rows]
        rest_width = bucket_size(max(len(r) for r in rests), minimum=MIN_WIDTH,
                                 what="LLM judge continuation length")
        heads, head_segments = np.full((len(chunk), head_width), self.pad_id, np.int32), \
            np.zeros((len(chunk), head_width), np.int32)
        for b, (rows, n) in enumerate(zip(chunk, prefixes)):  # left padding: heads end together
            if n:
                heads[b, head_width - n:], head_segments[b, head_width - n:] = rows[0][:n], 1
        tokens, segments = right_pad(rests, rest_width, self.pad_id)
        last = np.asarray([len(r) - 1 for r in rests], np.int32)
        return self.on_mesh.run(self._shared, heads, head_segments, tokens, segments, last)

    def _run_scratch(self, chunk):
        rows = [row for rows in chunk for row in rows]
        width = bucket_size(max(len(r) for r in rows), minimum=MIN_WIDTH, what="LLM judge text length")
        tokens, segments = right_pad(rows, width, self.pad_id)
        last = np.asarray([len(r) - 1 for r in rows], np.int32)
        return self.on_mesh.run(self._scratch, tokens, segments, last)

    def _judgments(self, prompts, candidates):
        k = len(candidates[0])
        pref = np.full((len(prompts), k, k), 0.5)
        if k == 1:
            return pref, {"position_inconsistency": np.zeros(len(prompts))}
        pairs, rows = self.pair_rows(prompts, candidates)
        values = self.margins(rows).astype(np.float64)
        ell = np.zeros((len(prompts), k, k))
        for p, (i, j) in enumerate(pairs):
            ell[:, i, j] = values[:, p]
        upper = np.triu_indices(k, 1)
        p_upper = expit((ell - np.swapaxes(ell, 1, 2))[:, upper[0], upper[1]] / 2)
        pref[:, upper[0], upper[1]] = p_upper
        pref[:, upper[1], upper[0]] = 1.0 - p_upper
        same_slot = ell[:, upper[0], upper[1]] * ell[:, upper[1], upper[0]] > 0
        return pref, {"position_inconsistency": same_slot.mean(axis=1)}
