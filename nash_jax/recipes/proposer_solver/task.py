"""The task's data: the sources the proposer writes from, the fixed anchor sources, and the held-out
problems (never a seed, never trained on); for the document task, the corpus and its questions."""

from dataclasses import dataclass

import numpy as np

from nash_jax import parallel
from nash_jax.runs.keys import stage_seed
from nash_jax.selfplay import answer_sources
from nash_jax.tasks.arithmetic import arithmetic
from nash_jax.tasks.documents import documents


@dataclass
class TaskData:
    sources: list  # answer_sources.Source the proposer writes from during training
    anchor_sources: list
    heldout: list  # (problem text, gold answer), never a seed and never trained on
    train_problems: list  # (problem, answer) the warm start's solver demonstrations use
    documents: list  # document texts the warm start's proposer demonstrations use (document task)


def task_data(config, run):
    ps, t = config.proposer_solver, config.proposer_solver.task
    if t.name == "document":
        corpus = t.corpus
        if corpus == "builtin":
            corpus = run / "data" / "corpus.jsonl"
            if parallel.is_writer() and not corpus.is_file():
                documents.write_corpus(corpus, seed=t.corpus_seed)
            parallel.barrier("proposer_solver corpus")
        rows = documents.load_corpus(corpus)
        order = np.random.default_rng(stage_seed(config.seed, 0, "heldout")).permutation(len(rows))
        held = [rows[i] for i in order[:t.heldout_documents]]
        train = [rows[i] for i in order[t.heldout_documents:]]
        if not train:
            raise ValueError(f"document corpus {corpus}: {len(rows)} documents, all held out "
                             f"(task.heldout_documents={t.heldout_documents})")
        sources = [answer_sources.Source(r["id"], "document", r["text"]) for r in train]
        heldout = [q for r in held for q in _document_questions(r["text"])]
        train_problems = [q for r in train for q in _document_questions(r["text"])]
        docs = [r["text"] for r in train]
    else:
        heldout = arithmetic.random_problems(ps.anchors.heldout_problems,
                                             stage_seed(config.seed, 0, "heldout"))
        seeds = arithmetic.random_problems(t.seeds, stage_seed(config.seed, 0, "seeds"),
                                           exclude={p for p, _ in heldout})
        sources = [answer_sources.Source(f"seed-{i}", "seed", p) for i, (p, _) in enumerate(seeds)]
        train_problems, docs = [], []
    anchors = [sources[i % len(sources)] for i in range(ps.anchors.sources)]
    return TaskData(sources, anchors, heldout, train_problems, docs)


def _document_questions(text):
    """(question, answer) of both facts of a generated document (the held-out questions)."""
    d = documents.words(text)
    if len(d) < 9:
        return []
    return [(f"how many {d[i + 1]} does the {d[1]} {d[2]} have ?", d[i]) for i in (4, 7)]


def heldout_texts(task):
    return {p for p, _ in task.heldout}
