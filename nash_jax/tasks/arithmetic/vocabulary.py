"""The word-level tokenizer of the proposer-solver tasks (arithmetic and documents), built with the
`tokenizers` library and loaded through transformers like any other. It ships beside this file;
`build_tokenizer` rebuilds it and a test checks the shipped copy."""


from nash_jax.models.tokenizer import build_word_tokenizer
from nash_jax.tasks.arithmetic import arithmetic
from nash_jax.tasks.documents import documents
from nash_jax.tasks import registry

TOKENIZER_DIR = registry.MODELS["builtin:proposer_solver"].tokenizer_dir
PROMPT_WORDS = ("role:", "proposer", "solver", "source:", "seed", "document", "document:", "problem:",
                "write", "a", "new", "problem", "question", "and", "its", "answer", "from", "the", "=")
NUMBERS = tuple(str(n) for n in range(arithmetic.MAX_ANSWER + 1))
SYMBOLS = ("+", "-", "*", "/", "(", ")")


def words():
    """Every word of the vocabulary after the special tokens, each once, in a fixed order."""
    out = {}
    for word in (*PROMPT_WORDS, *NUMBERS, *SYMBOLS, *documents.QUESTION_WORDS,
                 *documents.DOCUMENT_WORDS):
        out.setdefault(word, None)
    return tuple(out)


def build_tokenizer(path=TOKENIZER_DIR):
    """Build the tokenizer and save it (tokenizer.json + config) into `path`."""
    return build_word_tokenizer(path, words())
