"""Tiny Hugging Face decoder directories for the LLM-judge and reward-model tests, built with
transformers' PyTorch classes: a random causal LM, the same LM rigged to prefer the first slot, and
random sequence classifiers. All use tests/tiny_hf.py's word-level tokenizer and chat template.

Fixtures: `tiny_judge_dir` (kind -> directory), `python_judge_module` (a module on a temporary path).
"""

import functools
import textwrap

import pytest
import torch
import transformers

from tests.tiny_hf import COMMON, build_torch_model, write_tokenizer

WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "hello", "world")
LABELS = ("fox", "dog")  # one token each in the word-level vocabulary


def rig_first_slot(model, tokenizer):
    """Make logit(LABELS[0]) − logit(LABELS[1]) > 0 on every text: the residual stream's coordinate 0
    is the embedding's constant 5 (no layer writes to it), the final norm keeps it positive, and the
    head reads it for label A only."""
    a, b = (tokenizer.convert_tokens_to_ids(label) for label in LABELS)
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 5.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0
        model.model.norm.weight[0] = 1.0
        model.lm_head.weight[a] = 0.0
        model.lm_head.weight[a, 0] = 1.0
        model.lm_head.weight[b] = 0.0
    return model


def reward_model():
    """A LlamaForSequenceClassification (one label, pad_token_id = the tokenizer's <pad>) over the
    random decoder of tiny_hf's llama_gqa, with a random score head."""
    model = transformers.LlamaForSequenceClassification(
        transformers.LlamaConfig(**COMMON, num_labels=1, pad_token_id=1)).eval()
    model.model.load_state_dict(build_torch_model("llama_gqa").model.state_dict())
    torch.manual_seed(1)
    with torch.no_grad():
        model.score.weight.normal_(0.0, 0.3)
    return model


@pytest.fixture(scope="session")
def tiny_judge_dir(tmp_path_factory):
    """kind ("llm", "first_slot", "reward_model") -> (directory, the torch model, the tokenizer)."""

    @functools.cache
    def make(kind):
        path = tmp_path_factory.mktemp(kind)
        tokenizer = write_tokenizer(path)
        assert tokenizer.pad_token_id == 1
        model = reward_model() if kind == "reward_model" else build_torch_model("llama_gqa")
        if kind == "first_slot":
            model = rig_first_slot(model, tokenizer)
        model.save_pretrained(path)
        return path, model, tokenizer

    return make


PYTHON_JUDGE = textwrap.dedent('''
    import numpy as np

    def longer_wins(prompts, candidates):
        """P(i ≻ j) = 1 when i is longer, 0.5 on ties."""
        lengths = np.array([[len(c) for c in cands] for cands in candidates], float)
        return 0.5 + 0.5 * np.sign(lengths[:, :, None] - lengths[:, None, :])

    def length_reward(prompts, responses):
        return [len(r) / 10 for r in responses]

    def not_antisymmetric(prompts, candidates):
        k = len(candidates[0])
        out = np.full((len(prompts), k, k), 0.9)
        out[:, range(k), range(k)] = 0.5
        return out
''')


@pytest.fixture
def python_judge_module(tmp_path, monkeypatch):
    """The module name of PYTHON_JUDGE, written to a temporary directory on sys.path."""
    name = f"user_judges_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(PYTHON_JUDGE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name
