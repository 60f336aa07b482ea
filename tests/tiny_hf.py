"""Tiny Hugging Face decoders built with transformers' PyTorch classes and saved with save_pretrained
(the `hf_model_dir` fixture, registered for every test directory by tests/conftest.py).

Every parameter (norm scales and biases included) is re-drawn at random so that a mis-mapped tensor
cannot hide behind transformers' ones/zeros initialisation.
"""

import numpy as np
import pytest
import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

COMMON = dict(vocab_size=101, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=256)

VARIANTS = {
    "llama_gqa": ("LlamaConfig", "LlamaForCausalLM", {}),
    "llama3_rope_scaling": ("LlamaConfig", "LlamaForCausalLM", {"rope_parameters": {
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}),
    "llama_biases": ("LlamaConfig", "LlamaForCausalLM", {"attention_bias": True, "mlp_bias": True}),
    "mistral_sliding_window": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 4}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {}),
    "qwen3_tied": ("Qwen3Config", "Qwen3ForCausalLM", {"tie_word_embeddings": True}),
}


def build_torch_model(variant, seed=0, **overrides):
    config_class, model_class, extra = VARIANTS[variant]
    return random_torch_model(config_class, model_class, {**COMMON, **extra, **overrides}, seed)


def random_torch_model(config_class, model_class, values, seed=0):
    """A transformers model of `config_class(**values)`, every parameter re-drawn at random."""
    config = getattr(transformers, config_class)(**values)
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            scale = 0.3 if name.endswith("norm.weight") else 0.08
            base = 1.0 if name.endswith("norm.weight") else 0.0
            param.copy_(base + scale * torch.randn_like(param))
    return model


def saved_models_fixture(build):
    """A session fixture: variant -> (directory with config.json + model.safetensors written by
    transformers' save_pretrained, the torch model), each variant built by `build(variant)` once."""

    @pytest.fixture(scope="session")
    def fixture(tmp_path_factory):
        cache = {}

        def make(variant):
            if variant not in cache:
                model = build(variant)
                path = tmp_path_factory.mktemp(variant)
                model.save_pretrained(path)
                cache[variant] = (path, model)
            return cache[variant]

        return make

    return fixture


hf_model_dir = saved_models_fixture(build_torch_model)


def torch_logits(model, tokens, **kwargs):
    with torch.no_grad():
        return model(torch.as_tensor(np.asarray(tokens)), **kwargs).logits.float().numpy()


CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|> {% endif %}")


def write_tokenizer(path):
    """A word-level tokenizer trained on a few lines, saved as transformers saves one."""
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    lines = ["the quick brown fox", "jumps over the lazy dog", "hello world <|user|> <|assistant|>"]
    tok.train_from_iterator(lines, trainers.WordLevelTrainer(special_tokens=["<unk>", "<pad>", "</s>"]))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>",
                                                pad_token="<pad>", eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    return fast
