"""PairRM (LLM-Blender's pairwise reward model) in Flax: a DeBERTa-v3 encoder and a pairwise head.

One encoder pass reads `[CLS] <|source|> x [SEP] [CLS] <|candidate1|> A [SEP] [CLS] <|candidate2|> B
[SEP]` and gives s(A, B) = f([h_s, h_A]) − f([h_s, h_B]) with f(z) = W2 tanh(W1 z + b1) + b2 on the hidden
states at the three markers. `prob_matrix` runs every ordered pair i ≠ j once (K(K−1) rows per prompt,
batched, length-bucketed, jitted) and combines the two orientations as

    P(i ≻ j) = σ((s(i, j) − s(j, i)) / 2)         (mode="pairwise", the default)

which is a true pairwise probability, symmetric by construction. mode="blender" reproduces the
official SPPO pipeline instead: P(i ≻ j) = σ(score_i − score_j) with LLM-Blender's aggregated
score_i = mean_j (s(i, j) − s(j, i)), which mixes every other candidate into each entry (SPPO issue 15).
"""

import logging
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from flax import nnx
from scipy.special import expit

from nash_jax.judges.base import PreferenceModel
from nash_jax.judges.on_mesh import OnMesh, default_mesh
from nash_jax.models import deberta
from nash_jax.models.deberta import Linear, config_from_hf
from nash_jax.models.hf import read_config
from nash_jax.models.loading import (COPY, TRANSPOSE, ArraySource, KeyMap, Rule, SafetensorsSource,
                                     load_into, open_safetensors)
from nash_jax.models.tokenizer import load_tokenizer
from nash_jax.parallel.padding import bucket_size

log = logging.getLogger(__name__)

SOURCE, CANDIDATE1, CANDIDATE2, CANDIDATE = ("<|source|>", "<|candidate1|>", "<|candidate2|>",
                                             "<|candidate|>")
MARKER_CONFIG_KEYS = {SOURCE: "source_prefix_id", CANDIDATE1: "cand1_prefix_id",
                      CANDIDATE2: "cand2_prefix_id"}
SOURCE_MAX_TOKENS = 1224  # PairRM's training lengths: source ≤ 1224, the pair shares the rest of 2048
TOTAL_MAX_TOKENS = 2048
MODES = ("pairwise", "blender")
# The checkpoint: DebertaV2Model under `pretrained_model.`, the head's Sequential as `head_layer.`.
KEY_MAP = KeyMap(deberta.key_rules("pretrained_model.", "encoder.") + [
    Rule("head_layer.1.weight", "head.hidden.kernel", TRANSPOSE),
    Rule("head_layer.1.bias", "head.hidden.bias", COPY),
    Rule("head_layer.4.weight", "head.out.kernel", TRANSPOSE),
    Rule("head_layer.4.bias", "head.out.bias", COPY),
], deberta.PLACEHOLDERS, ignored=deberta.IGNORED)


class PairwiseHead(nnx.Module):
    def __init__(self, hidden_size, param_dtype, rngs):
        self.hidden = Linear(2 * hidden_size, hidden_size, ("mlp", "embed"), param_dtype, rngs)
        self.out = Linear(hidden_size, 1, ("embed", None), param_dtype, rngs)

    def __call__(self, z):
        return self.out(jnp.tanh(self.hidden(z)))[..., 0]


class PairRMNet(nnx.Module):
    def __init__(self, encoder, head):
        self.encoder, self.head = encoder, head

    def __call__(self, input_ids, attention_mask, markers):
        """s(A, B) [N] for rows [N, L] whose source / candidate1 / candidate2 markers sit at markers [N, 3]."""
        hidden = self.encoder(input_ids, attention_mask)
        at = jnp.take_along_axis(hidden, markers[:, :, None], axis=1).astype(jnp.float32)
        left = self.head(jnp.concatenate([at[:, 0], at[:, 1]], axis=-1))
        right = self.head(jnp.concatenate([at[:, 0], at[:, 2]], axis=-1))
        return left - right


# Row widths a run compiles for: powers of two, with 768 and 1536 between the long ones where PairRM
# rows live (a source ≤ 1224 tokens plus two answers), so that a 600-token row is padded to 768, not
# 1024. With one batch size a run compiles one program per width it meets (at most 7), each holding
# one scanned layer; rows are never under ~10 tokens, so no widths below 128.
LENGTH_BUCKETS = (128, 256, 512, 768, 1024, 1536, 2048)


def neutralise(text, specials):
    """Break up literal special-token strings in user text, so that a response that contains
    "<|candidate1|>" or "[SEP]" cannot create a second marker or segment."""
    for special in specials:
        text = text.replace(special, f"{special[0]} {special[1:]}")
    return text


class PairRM(PreferenceModel):
    def __init__(self, net, tokenizer, marker_ids, *, mesh=None, batch_size=16, mode="pairwise",
                 length_buckets=LENGTH_BUCKETS):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {MODES}")
        if not length_buckets or max(length_buckets) < TOTAL_MAX_TOKENS or min(length_buckets) < 1:
            raise ValueError(f"PairRM length_buckets={length_buckets}: expected positive widths, "
                             f"the largest ≥ {TOTAL_MAX_TOKENS} (the longest row PairRM builds)")
        self.length_buckets = tuple(sorted(length_buckets))
        self.net, self.tokenizer, self.marker_ids = net, tokenizer, marker_ids
        self.on_mesh = OnMesh(net, mesh)
        self.batch_size = self.on_mesh.per_call(batch_size)
        self.mode = mode
        self.rows_computed = 0  # encoder rows run so far (pairs, not counting batch padding)
        # This judge's own jitted forward: its cache holds exactly the programs this judge compiled.
        self._forward = self.on_mesh.jit(lambda net, *rows: net(*rows))
        self.shapes_run = set()  # (rows, width) of every batch shape run so far
        self._specials = sorted({SOURCE, CANDIDATE1, CANDIDATE2, CANDIDATE,
                                 *tokenizer.all_special_tokens})

    @classmethod
    def from_pretrained(cls, path, *, mesh=None, dtype="float32", batch_size=16, mode="pairwise",
                        length_buckets=LENGTH_BUCKETS):
        """PairRM from a local directory: config.json (deberta-v2 + the marker ids), the weights
        (model.safetensors, or pytorch_model.bin read with torch weights_only) and the tokenizer."""
        path = Path(path)
        hf = read_config(path)
        config = config_from_hf(hf, dtype=dtype, source=str(path / "config.json"))
        mesh = default_mesh(mesh)
        graphdef, state = nnx.split(nnx.eval_shape(lambda: PairRMNet(
            deberta.Deberta(config, rngs=nnx.Rngs(0)),
            PairwiseHead(config.hidden_size, config.param_dtype, nnx.Rngs(0)))))
        load_into(state, KEY_MAP, _tensor_source(path), mesh=mesh,
                  what=f"{path}: not a PairRM checkpoint of this config.json")
        net = nnx.merge(graphdef, state)
        tokenizer = load_tokenizer(path)
        marker_ids = []
        for marker, key in MARKER_CONFIG_KEYS.items():
            token_id = tokenizer.convert_tokens_to_ids(marker)
            if hf.get(key) is not None and hf[key] != token_id:
                raise ValueError(f"{path}: config.json says {key}={hf[key]} but the tokenizer maps "
                                 f"{marker} to {token_id}")
            if token_id is None or token_id == tokenizer.unk_token_id:
                raise ValueError(f"{path}: the tokenizer has no {marker} token")
            marker_ids.append(token_id)
        return cls(net, tokenizer, tuple(marker_ids), mesh=mesh,
                   batch_size=batch_size, mode=mode, length_buckets=length_buckets)

    # Tokenisation, exactly as PairRM was trained (the PairRM-hf model card's recipe).
    def _encode(self, marker, text, max_length):
        return self.tokenizer(marker + neutralise(text, self._specials), max_length=max_length,
                              truncation=True)["input_ids"]

    def _rows(self, prompts, pairs):
        """Token rows and marker positions for (prompt index, A text, B text) triples."""
        rows, markers = [], []
        cache = {}
        for b, a, c in pairs:
            if ("src", b) not in cache:
                cache["src", b] = self._encode(SOURCE, prompts[b], SOURCE_MAX_TOKENS)
            source = cache["src", b]
            budget = (TOTAL_MAX_TOKENS - len(source)) // 2
            for marker, text in ((CANDIDATE1, a), (CANDIDATE2, c)):
                if (marker, b, text) not in cache:
                    cache[marker, b, text] = self._encode(marker, text, budget)
            row = source + cache[CANDIDATE1, b, a] + cache[CANDIDATE2, b, c]
            where = [np.nonzero(np.asarray(row) == m)[0] for m in self.marker_ids]
            if any(len(w) != 1 for w in where):
                raise ValueError(f"prompt {b}: a PairRM row needs exactly one of each marker; "
                                 f"found {[len(w) for w in where]}")
            rows.append(row)
            markers.append([int(w[0]) for w in where])
        return rows, np.asarray(markers, np.int32)

    def _logits(self, prompts, pairs):
        return self.run_rows(*self._rows(prompts, pairs))

    def compiled_programs(self):
        """How many encoder programs this judge has compiled (one per batch shape it has met)."""
        return self._forward._cache_size()

    def run_rows(self, rows, markers):
        """s for token rows (lists of ids) with their marker positions [N, 3]: sorted by length,
        cut into batches of `batch_size`, each padded to the smallest of `length_buckets` that holds
        its longest row, run jitted."""
        out = np.empty(len(rows), np.float32)
        order = np.argsort([len(r) for r in rows], kind="stable")  # similar lengths share a bucket
        for start in range(0, len(rows), self.batch_size):
            chunk = order[start:start + self.batch_size]
            width = bucket_size(max(len(rows[i]) for i in chunk), self.length_buckets,
                                what="PairRM row length")
            ids = np.zeros((self.batch_size, width), np.int32)  # right padding with [PAD] = 0
            mask = np.zeros((self.batch_size, width), np.int32)
            marks = np.zeros((self.batch_size, 3), np.int32)
            for slot, i in enumerate(chunk):
                ids[slot, :len(rows[i])], mask[slot, :len(rows[i])] = rows[i], 1
                marks[slot] = markers[i]
            mask[len(chunk):, 0] = 1  # padding rows: one real token keeps them finite
            if (self.batch_size, width) not in self.shapes_run:
                self.shapes_run.add((self.batch_size, width))
                log.info("PairRM: compiling the encoder for %d rows × %d tokens (shape %d of this "
                         "judge)", self.batch_size, width, len(self.shapes_run))
            # every process holds the same rows (multi-process: each places its share)
            out[chunk] = self.on_mesh.run(self._forward, ids, mask, marks)[:len(chunk)]
        self.rows_computed += len(rows)
        return out

    def logits(self, prompts, a, b):
        """s(A, B) [N] as PairRM defines it (one orientation; positive means A is better)."""
        if not len(prompts) == len(a) == len(b):
            raise ValueError(f"{len(prompts)} prompts, {len(a)} A and {len(b)} B responses")
        return self._logits(list(prompts), [(i, x, y) for i, (x, y) in enumerate(zip(a, b))])

    def _prob_matrix(self, prompts, candidates):
        k = len(candidates[0])
        pairs = [(b, i, j) for b in range(len(prompts)) for i in range(k) for j in range(k) if i != j]
        s = np.zeros((len(prompts), k, k))
        values = self._logits(prompts, [(b, candidates[b][i], candidates[b][j]) for b, i, j in pairs])
        for (b, i, j), value in zip(pairs, values):
            s[b, i, j] = value
        antisymmetric = s - np.swapaxes(s, 1, 2)  # s(i, j) − s(j, i)
        if self.mode == "pairwise":
            pref = expit(antisymmetric / 2)
        else:
            score = antisymmetric.mean(axis=2)  # LLM-Blender's max_logits aggregation (÷ K)
            pref = expit(score[:, :, None] - score[:, None, :])
        idx = np.arange(k)
        pref[:, idx, idx] = 0.5
        return pref


def _tensor_source(path):
    """model.safetensors, read lazily; else pytorch_model.bin through torch (weights_only)."""
    weights = path / "model.safetensors"
    if weights.is_file():
        return SafetensorsSource({key: weights for key in open_safetensors(weights).keys()})
    legacy = path / "pytorch_model.bin"
    if legacy.is_file():
        try:
            import torch
        except ImportError:
            raise FileNotFoundError(f"{path} has only pytorch_model.bin; reading it needs torch "
                                    "(pip install torch), or convert it to model.safetensors") from None
        state = torch.load(legacy, map_location="cpu", weights_only=True)
        return ArraySource({k: v.float().numpy() for k, v in state.items()})
    raise FileNotFoundError(f"{path} has neither model.safetensors nor pytorch_model.bin")
