"""Tokenisers and chat templates, through transformers, from local files only."""

from pathlib import Path

from transformers import AutoTokenizer


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")  # any one


def tokenizer_problem(path):
    """Why `path` is not a local tokenizer directory (a phrase), or None when it is one."""
    path = Path(path)
    if not path.is_dir():
        return "does not exist" if not path.exists() else "is not a directory"
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        return f"has no tokenizer files ({', '.join(TOKENIZER_FILES[:-1])} or {TOKENIZER_FILES[-1]})"
    return None


def load_tokenizer(path):
    """transformers.AutoTokenizer from a local directory; never downloads, never runs remote code."""
    problem = tokenizer_problem(path)
    if problem:
        raise FileNotFoundError(f"tokenizer directory {path} {problem}")
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)


def chat_prompt(tokenizer, prompt, *, system=None):
    """The prompt as the model expects it: the chat template with a generation prompt appended,
    or the prompt unchanged for a tokeniser without a template (a base model)."""
    if not getattr(tokenizer, "chat_template", None):
        return prompt
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": prompt}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


# The shipped word-level tokenizers (the synthetic task's, the self-play tasks', the games'): their
# special tokens and a chat template that puts each message after its role tag on one line.
WORD_SPECIAL = ("<unk>", "<pad>", "<s>", "</s>", "<|user|>", "<|assistant|>")
WORD_CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} "
                      "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")


def build_word_tokenizer(path, words, pre_tokenizer=None):
    """A word-level tokenizer over WORD_SPECIAL + `words` (split on whitespace, or by the given
    `tokenizers` pre-tokenizer), with WORD_CHAT_TEMPLATE, saved into `path`; returns it."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {word: i for i, word in enumerate((*WORD_SPECIAL, *words))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizer or pre_tokenizers.WhitespaceSplit()
    return save_with_word_specials(tok, path)


def save_with_word_specials(tok, path):
    """A `tokenizers.Tokenizer` as a transformers fast tokenizer with WORD_SPECIAL's roles and
    WORD_CHAT_TEMPLATE, saved into `path`; returns it."""
    import transformers

    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
        eos_token="</s>", additional_special_tokens=["<|user|>", "<|assistant|>"])
    fast.chat_template = WORD_CHAT_TEMPLATE
    fast.save_pretrained(path)
    return fast
