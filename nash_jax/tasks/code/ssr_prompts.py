"""What the SSR policy reads: the injector's prompt (a repository's files), the solver's prompt (the
buggy, weakened repository's source files and the reversed weakening patch as its specification), and
the byte-level BPE tokenizer of the built-in model (it ships beside this file; `build_tokenizer`
rebuilds it from the training repositories, and decoding gives back every byte a diff needs).

Both prompts end with the line that names the task, so that a prompt cut on the left
(data.too_long: truncate_left) keeps what is asked and the files nearest to it.
"""

import tempfile
from pathlib import Path

from nash_jax.models.tokenizer import WORD_SPECIAL, save_with_word_specials
from nash_jax.tasks.code.mutations import mutants, unified_diff
from nash_jax.tasks.code.ssr_artifact import Artifact, policy_text
from nash_jax.tasks.code.ssr_demonstrations import weaken
from nash_jax.tasks.code.ssr_patch import reversed_diff
from nash_jax.tasks.code import code_repositories, generated_repos
from nash_jax.tasks import registry

TOKENIZER_DIR = registry.MODELS["builtin:ssr"].tokenizer_dir
VOCAB_SIZE = 2048
# what a model that reads instructions needs to know of the answer's form (tasks.code.ssr_artifact)
INJECTOR_FORMAT = ("write a unified diff of source files in <bug_inject.diff>, one of test files that "
                   "hides the failures in <test_weaken.diff>, and the oracle test files in <test_files>")
SOLVER_FORMAT = "write a unified diff of the source files that makes the specification's tests pass"


def _files_text(root, names):
    return "".join(f"### {name}\n{(Path(root) / name).read_text(encoding='utf-8')}" for name in names)


def injector_prompt(repository, root):
    """The injector's prompt: every file of the repository at `root`, then the request."""
    files = code_repositories.repository_files(root)
    wanted = [f for f in files if code_repositories.is_source_file(f) or code_repositories.is_test_file(f)]
    return _files_text(root, wanted) + (f"### task\ninject a bug into {Path(str(repository)).name}: "
                                        f"{INJECTOR_FORMAT}\n")


def solver_prompt(folder, specification):
    """The solver's prompt: the source files of the buggy repository at `folder` (its test files are
    the weakened ones and the grader resets them), the reversed weakening patch, then the request."""
    sources = [f for f in code_repositories.repository_files(folder) if code_repositories.is_source_file(f)]
    return (_files_text(folder, sources) + f"### specification\n{specification}"
            f"### task\nrepair the bug: {SOLVER_FORMAT}\n")


def training_texts():
    """What the tokenizer is fitted to: the training repositories' files and their prompts, and
    GENERATED_FOR_TOKENIZER repositories of the generated family's training split with an artifact
    and a repair of each of their mutants (the zero-context diffs a policy writes)."""
    out = []
    for row in code_repositories.rows("train"):
        out += row["source_texts"] + row["test_texts"]
        out.append(injector_prompt(row["name"], row["path"]))
    return out + _generated_texts(GENERATED_FOR_TOKENIZER)


GENERATED_FOR_TOKENIZER = 32


def _generated_texts(n):
    """Prompts, artifacts (the test a mutant breaks removed, not run: the tokenizer needs the
    text's form only) and repairs of n generated training repositories (the solver's prompt shows
    the original sources here: the form, again, is what counts)."""
    out = []
    with tempfile.TemporaryDirectory(prefix="nash-jax-tokenizer-") as scratch:
        for root in generated_repos.write_repositories(scratch, "train", n, seed=0):
            (test,) = [f for f in code_repositories.repository_files(root) if code_repositories.is_test_file(f)]
            before = (root / test).read_text(encoding="utf-8")
            out.append(injector_prompt(root.name, root))
            for mutant in mutants(root, seed=0):
                broken = generated_repos.covering_test(mutant.original, mutant.line)
                weakening = unified_diff(test, before, weaken(before, {broken}))
                out.append(policy_text(Artifact(mutant.bug_diff, weakening, (test,), root.name)))
                out.append(solver_prompt(root, reversed_diff(weakening, test)) + mutant.repair_diff)
    return out


def build_tokenizer(path=TOKENIZER_DIR, vocab_size=VOCAB_SIZE):
    """Fit the byte-level BPE tokenizer (WORD_SPECIAL tokens, WORD_CHAT_TEMPLATE) and save it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(WORD_SPECIAL),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(training_texts(), trainer)
    return save_with_word_specials(tok, path)
