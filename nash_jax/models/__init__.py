"""Models: the decoder family (Llama, Mistral, Qwen, Gemma 2/3), Hugging Face checkpoints in and out,
tokenisers."""

from nash_jax.models.hf import load_pretrained, save_pretrained
from nash_jax.models.llama import KVCache, Llama, LlamaConfig
from nash_jax.models.tokenizer import chat_prompt, load_tokenizer

__all__ = ["KVCache", "Llama", "LlamaConfig", "chat_prompt", "load_pretrained", "load_tokenizer",
           "save_pretrained"]
