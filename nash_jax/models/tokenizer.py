"""Tokenisers and chat templates, through transformers, from local files only."""

from pathlib import Path

from transformers import AutoTokenizer


def load_tokenizer(path):
    """transformers.AutoTokenizer from a local directory; never downloads, never runs remote code."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"tokenizer directory {path} does not exist")
    if not any((path / name).is_file() for name in
               ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")):
        raise FileNotFoundError(f"{path} has no tokenizer files (tokenizer.json, tokenizer.model, "
                                "vocab.json or tokenizer_config.json)")
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)


def chat_prompt(tokenizer, prompt, *, system=None):
    """The prompt as the model expects it: the chat template with a generation prompt appended,
    or the prompt unchanged for a tokeniser without a template (a base model)."""
    if not getattr(tokenizer, "chat_template", None):
        return prompt
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": prompt}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
