"""Document-grounded proposals (SPICE): a proposer reads a document and writes a question with a gold
answer taken from it; solvers answer without the document.

The corpus is a local jsonl / parquet file with a `text` column, read through `datasets`
(`load_corpus`). A small generated corpus ships for the demo and the tests (`write_corpus`): facts such
as "the town alder has 12 bridges and 7 schools ." about made-up places, so that no solver can know an
answer before it has been taught one.

A proposal reads "question: <words> ? answer: <words>". It is grounded (`check_grounded`) when, on
lower-cased whitespace tokens with the final "." and "?" split off:
  - the answer is a contiguous token span of the document (it is read off the document, not invented);
  - the answer's tokens do not all appear in the question (the question does not give it away);
  - the question has at least three tokens and ends with "?".
The gold answer is the answer span; a solver is right when its normalised reply equals it exactly.
"""

import json
import re
from pathlib import Path

import numpy as np

from nash_jax.data import quietly
from nash_jax.runs.files import reading_text
from nash_jax.selfplay.answer_sources import Proposal, TermsPrompts

NAMES = ("alder", "bell", "corin", "dunmore", "elsby", "fenwick", "garth", "holm", "ivel", "jarrow",
         "kesh", "lorn", "marsk", "nolt", "orrin", "pell")
KINDS = ("town", "village")
FEATURES = ("bridges", "schools", "parks", "wells", "towers", "mills")
MAX_COUNT = 40
QUESTION_WORDS = ("question:", "answer:", "how", "many", "does", "the", "have", "?")
DOCUMENT_WORDS = ("the", "has", "and", ".", *KINDS, *NAMES, *FEATURES)
_PROPOSAL = re.compile(r"^\s*question:\s*(?P<question>.*?)\s*answer:\s*(?P<answer>.*?)\s*$", re.S)


def generate_corpus(seed=0):
    """[{"id", "text"}] one document per (kind, name): two features with counts in [1, MAX_COUNT]."""
    rng = np.random.default_rng(seed)
    rows = []
    for kind in KINDS:
        for name in NAMES:
            f1, f2 = rng.choice(len(FEATURES), size=2, replace=False)
            n1, n2 = (int(x) for x in rng.integers(1, MAX_COUNT + 1, size=2))
            rows.append({"id": f"{kind}-{name}",
                         "text": f"the {kind} {name} has {n1} {FEATURES[f1]} and {n2} {FEATURES[f2]} ."})
    return rows


def write_corpus(path, seed=0):
    """Write generate_corpus(seed) as jsonl at `path` (whole or not at all); returns the path."""
    from nash_jax.runs import write_text_atomically

    path = Path(path)
    write_text_atomically(path, "".join(json.dumps(r) + "\n" for r in generate_corpus(seed)))
    return path


def check_corpus_file(path, column="text"):
    """The `datasets` builder of a corpus file (json or parquet), or the error that says what is wrong
    with `path`: checked before a run starts, and again when the corpus is read."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"document corpus {path} does not exist; expected a jsonl or parquet file "
                                f"with a {column!r} column")
    kind = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}.get(path.suffix)
    if kind is None:
        raise ValueError(f"document corpus {path}: expected a .jsonl, .json or .parquet file")
    return kind


def load_corpus(path, column="text"):
    """[{"id", "text"}] of a jsonl / parquet / json file through `datasets` (ids: an `id` column, else
    the row number)."""
    from datasets import load_dataset

    path = Path(path)
    ds = quietly(lambda: load_dataset(check_corpus_file(path, column), data_files=str(path), split="train"))
    if column not in ds.column_names:
        raise ValueError(f"document corpus {path} has columns {ds.column_names}; expected {column!r}")
    with reading_text(path):  # arrow decodes the strings only here
        ids = list(ds["id"]) if "id" in ds.column_names else [str(i) for i in range(len(ds))]
        return [{"id": str(i), "text": t} for i, t in zip(ids, list(ds[column]))]


def words(text):
    """Lower-cased whitespace tokens, with "." and "?" split off as tokens of their own."""
    return re.sub(r"([.?])", r" \1 ", (text or "").lower()).split()


def parse_proposal(text):
    """(question, answer) of "question: ... answer: ...", or None."""
    match = _PROPOSAL.match(text or "")
    if match is None:
        return None
    return " ".join(words(match["question"])), " ".join(words(match["answer"]))


def check_grounded(document, question, answer):
    """"" when (question, answer) is grounded in `document` (see the module docstring), else the reason."""
    q, a, d = words(question), words(answer), words(document)
    if len(q) < 3 or q[-1] != "?":
        return "question has fewer than three words or does not end with '?'"
    if not a:
        return "empty answer"
    if not any(d[i:i + len(a)] == a for i in range(len(d) - len(a) + 1)):
        return "answer is not a span of the document"
    if all(token in q for token in a):
        return "the question contains the answer"
    return ""


def normalise_reply(text):
    """A solver's reply as compared with a gold answer: a leading "answer:" dropped, words joined."""
    tokens = words(text)
    if tokens and tokens[0] == "answer:":
        tokens = tokens[1:]
    while tokens and tokens[-1] in (".", "?"):
        tokens.pop()
    return " ".join(tokens)


def demonstration(document, rng):
    """A grounded proposal about `document` as a teacher would write it (warm start)."""
    d = words(document)  # the <kind> <name> has <n1> <f1> and <n2> <f2> .
    kind, name = d[1], d[2]
    n, feature = (d[4], d[5]) if rng.random() < 0.5 else (d[7], d[8])
    return f"question: how many {feature} does the {kind} {name} have ? answer: {n}"


class DocumentTask(TermsPrompts):
    """The proposer–solver task (`proposer_solver.task.name: document`): a proposal is valid when it is
    "question: ... answer: ..." with the answer grounded in the source document (`check_grounded`)."""

    name, kind, labelled_by = "document", "document", "document"

    def check(self, source, text):
        parsed = parse_proposal(text)
        if parsed is None:
            return Proposal(False, "not 'question: ... answer: ...'")
        question, answer = parsed
        reason = check_grounded(source.text, question, answer)
        if reason:
            return Proposal(False, reason)
        return Proposal(True, "", question, answer, answer)

    def read(self, reply):
        return normalise_reply(reply) or None
