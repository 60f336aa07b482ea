"""Hugging Face sequence-classification reward models (LlamaForSequenceClassification and the
equivalents of the families nash_jax loads) in Flax, on the mesh: the decoder, then the `score` head
read at the last non-padding token, as transformers reads it.

Each (prompt, response) is formatted by the reward model's chat template as one user and one
assistant message (the raw prompt + response when it has none). transformers pools at the rightmost
token that is not `pad_token_id` (config.json); so does this, within each row's own tokens, so a text
that ends in its pad token (pad = EOS) is read where transformers reads it. `rewards` gives r(y | x);
judges/simple.RewardJudge turns it into P(i ≻ j) = σ(r_i − r_j).
"""

import dataclasses
import logging
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from flax import nnx

from nash_jax.judges.base import RewardModel
from nash_jax.judges.on_mesh import MIN_WIDTH, OnMesh
from nash_jax.models import hf, loading
from nash_jax.models.llama import Llama
from nash_jax.models.params import param
from nash_jax.models.tokenizer import load_tokenizer
from nash_jax.parallel.padding import bucket_size, right_pad

log = logging.getLogger(__name__)


class ScoredDecoder(nnx.Module):
    """A decoder and a bias-free score head [E, 1] (the checkpoint's `score.weight` [1, E])."""

    def __init__(self, config, rngs):
        self.decoder = Llama(config, rngs=rngs)
        self.score = param(rngs, (config.hidden_size, 1), ("embed", None), config.param_dtype)

    def __call__(self, tokens, segment_ids, last):
        """r [N] fp32 for right-padded rows [N, T], read at positions last [N]."""
        hidden, _ = self.decoder.hidden_states(tokens, None, segment_ids)
        at = jnp.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0]
        return (at @ self.score[...].astype(at.dtype)).astype(jnp.float32)[:, 0]


def key_map(config):
    """The decoder's key table with our paths under `decoder.`, the score head, no LM head."""
    decoder = hf.key_map(config)
    rules = [dataclasses.replace(rule, ours="decoder." + rule.ours) for rule in decoder.rules]
    return loading.KeyMap(rules + [loading.Rule("score.weight", "score", loading.TRANSPOSE)],
                          decoder.placeholders, ignored=decoder.ignored)


def load_scored_decoder(path, *, mesh=None, dtype="float32"):
    """(ScoredDecoder, pad_token_id) from a local sequence-classification checkpoint."""
    path = Path(path)
    config_json = hf.read_config(path)
    labels = config_json.get("num_labels") or len(config_json.get("id2label") or {0: ""})
    if labels != 1:
        raise ValueError(f"{path / 'config.json'}: a classifier with {labels} labels; expected a reward "
                         "model (one score, num_labels 1)")
    config = hf.config_from_hf(config_json, dtype=dtype, source=str(path / "config.json"))
    # the head is `score`, not the unembedding: a tied decoder has no lm_head to look for
    config = dataclasses.replace(config, tie_word_embeddings=True)
    graphdef, state = nnx.split(nnx.eval_shape(lambda: ScoredDecoder(config, nnx.Rngs(0))))
    loading.load_into(state, key_map(config), loading.SafetensorsSource(hf._weight_files(path)),
                      mesh=mesh, what=f"{path}: not a sequence-classification reward model of this "
                                      "config.json")
    return nnx.merge(graphdef, state), config_json.get("pad_token_id")


def pooled_index(row, pad_id):
    """Where transformers reads the score: the rightmost token that is not pad_id (0 when none)."""
    if pad_id is None:
        return len(row) - 1
    kept = [i for i, token in enumerate(row) if token != pad_id]
    return kept[-1] if kept else 0


class HFRewardModel(RewardModel):
    """r(y | x) from a ScoredDecoder and its tokenizer; batch_size rows per device call (rounded down
    to a multiple of the data shards, at least one per shard), widths bucketed to powers of two."""

    def __init__(self, net, tokenizer, pad_id, *, mesh=None, batch_size=16, max_tokens=4096):
        self.tokenizer, self.pad_id, self.max_tokens = tokenizer, pad_id, max_tokens
        self.on_mesh = OnMesh(net, mesh)
        self.batch_size = self.on_mesh.per_call(batch_size)
        self._forward = self.on_mesh.jit(lambda net, *rows: net(*rows))

    @classmethod
    def from_pretrained(cls, path, *, mesh=None, dtype="float32", **kwargs):
        net, pad_id = load_scored_decoder(path, mesh=mesh, dtype=dtype)
        return cls(net, load_tokenizer(path), pad_id, mesh=mesh, **kwargs)

    def compiled_programs(self):
        return self._forward._cache_size()

    def encode(self, prompt, response):
        """The token list of one (prompt, response) as the reward model reads it."""
        if not getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer(prompt + response)["input_ids"]
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}],
            tokenize=False)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _rewards(self, prompts, responses):
        rows = [self.encode(p, r) for p, r in zip(prompts, responses)]
        for i, row in enumerate(rows):
            if len(row) > self.max_tokens:
                raise ValueError(f"the reward model's text for response {i} has {len(row)} tokens; "
                                 f"judge.max_tokens={self.max_tokens}")
        out = np.empty(len(rows), np.float32)
        order = np.argsort([len(r) for r in rows], kind="stable")  # similar lengths share a bucket
        fill = self.pad_id if self.pad_id is not None else 0
        for start in range(0, len(rows), self.batch_size):
            chunk = order[start:start + self.batch_size]
            batch = [rows[i] for i in chunk] + [[fill]] * (self.batch_size - len(chunk))
            width = bucket_size(max(len(r) for r in batch), minimum=MIN_WIDTH, what="reward model row")
            tokens, segments = right_pad(batch, width, fill)
            last = np.asarray([pooled_index(r, self.pad_id) for r in batch], np.int32)
            out[chunk] = self.on_mesh.run(self._forward, tokens, segments, last)[:len(chunk)]
        return out
