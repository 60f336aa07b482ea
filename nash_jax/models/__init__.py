"""Models: the decoder family (Llama, Mistral, Qwen, Gemma 2/3), Hugging Face checkpoints in and out,
tokenisers. Its names load on first use, so that a light submodule (packaged, the checkpoints pip
installed) can be imported, and a command's arguments checked, without loading JAX."""

import importlib

_WHERE = {"load_pretrained": "hf", "save_pretrained": "hf", "KVCache": "llama", "Llama": "llama",
          "LlamaConfig": "llama", "chat_prompt": "tokenizer", "load_tokenizer": "tokenizer"}

__all__ = sorted(_WHERE)


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
