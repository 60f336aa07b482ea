"""The word-level tokenizer of the proposer-solver tasks (arithmetic and documents), built with the
`tokenizers` library and loaded through transformers like any other. It ships beside this file;
`build_tokenizer` rebuilds it and a test checks the shipped copy."""

from pathlib import Path

from nash_jax.selfplay import arithmetic, documents

TOKENIZER_DIR = Path(__file__).with_name("proposer_solver_tokenizer")
SPECIAL = ("<unk>", "<pad>", "<s>", "</s>", "<|user|>", "<|assistant|>")
PROMPT_WORDS = ("role:", "proposer", "solver", "source:", "seed", "document", "document:", "problem:",
                "write", "a", "new", "problem", "question", "and", "its", "answer", "from", "the", "=")
NUMBERS = tuple(str(n) for n in range(arithmetic.MAX_ANSWER + 1))
SYMBOLS = ("+", "-", "*", "/", "(", ")")
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} "
                 "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")


def words():
    """Every word of the vocabulary after the special tokens, each once, in a fixed order."""
    out = {}
    for word in (*PROMPT_WORDS, *NUMBERS, *SYMBOLS, *documents.QUESTION_WORDS,
                 *documents.DOCUMENT_WORDS):
        out.setdefault(word, None)
    return tuple(out)


def build_tokenizer(path=TOKENIZER_DIR):
    """Build the tokenizer and save it (tokenizer.json + config) into `path`."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {word: i for i, word in enumerate((*SPECIAL, *words()))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
        eos_token="</s>", additional_special_tokens=["<|user|>", "<|assistant|>"])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    return fast
