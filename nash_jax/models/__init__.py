"""Models: the Llama-family decoder, Hugging Face checkpoints in and out, tokenisers."""

from nash_jax.models.hf import load_pretrained, save_pretrained
from nash_jax.models.llama import KVCache, Llama, LlamaConfig
from nash_jax.models.tokenizer import chat_prompt, load_tokenizer

__all__ = ["KVCache", "Llama", "LlamaConfig", "chat_prompt", "load_pretrained", "load_tokenizer",
           "save_pretrained"]
