"""Where a proposed problem's answer comes from, and the prompts of both roles.

An answer source checks a proposal (`check` → Proposal: valid or not, with a reason, the text the
solvers see, the gold answer) and scores the M solver replies to one valid proposal once all of them
are in (`score` → Scored: correctness per reply, p̂, the label used, what could not be parsed):

  verifier  a program (the task's `check`) parses the problem and computes its exact answer; a reply is
            right when the answer the task reads from it (`read`) equals it. p̂ = share of correct replies.
  document  (SPICE) the proposer reads a document and writes a question with a gold answer; the task's
            `check` makes it valid only when the answer is grounded in the document. Solvers never see
            the document. p̂ = share of replies equal to the gold answer.
  majority  (R-Zero) no external label: the solvers' majority answer is the label (ties to the answer
            seen first), a reply is right when it agrees with it, p̂ = majority share (over all M
            replies). Where the task has a checker (a parser's answer, a document's gold answer) the
            proposal carries it as `checker`, so the recipe can log how often the pseudo-label is right.

A task says what a proposal is and how a reply is read: a class with name, kind ("seed" or "document"),
labelled_by (the answer source that reads its gold answer), check(source, text) -> Proposal,
read(reply), proposer_prompt(source) and solver_prompt(problem) (the user messages; the chat template is
the tokenizer's). The task families register theirs by name (`register_task`) for a run config to name;
this module knows none of them.

Sources (`Source`) are what a proposer writes from: a seed problem or a document; comparison groups of
proposers are keyed by the source id.
"""

import importlib
from dataclasses import dataclass

import numpy as np

from nash_jax.core.advantages import majority_vote


@dataclass(frozen=True)
class Source:
    id: str
    kind: str  # "seed" (a seed problem) or "document"
    text: str


@dataclass(frozen=True)
class Proposal:
    valid: bool
    reason: str  # why not valid ("" when valid)
    problem: str = ""  # what solvers see
    gold: object = None  # the label solvers are scored against (None under majority vote)
    checker: object = None  # the true answer where the task can tell (pseudo-label accuracy)


@dataclass(frozen=True)
class Scored:
    correct: np.ndarray  # [M] float 0/1
    p_hat: float
    label: object  # the answer replies were compared with
    unparsed: int  # replies with no answer in them
    label_correct: float | None = None  # majority only: pseudo-label == checker (None: no checker)


def proposer_prompt(source):
    if source.kind == "document":
        return (f"role: proposer source: document document: {source.text} "
                "write a question and its answer from the document")
    return f"role: proposer source: seed problem: {source.text} write a new problem"


def solver_prompt(kind, problem):
    if kind == "document":
        return f"role: solver source: document question: {problem}"
    return f"role: solver source: seed problem: {problem} ="


# ---------------------------------------------------------------------------------------------------
# the tasks: how a proposal is checked and how a reply is read (registered by the task families)

class TermsPrompts:
    """The tiny policies' prompts: the role and the source in the task's own terms (proposer_prompt,
    solver_prompt above). A task for a real instruct model writes its own, in plain words."""

    def proposer_prompt(self, source):
        return proposer_prompt(source)

    def solver_prompt(self, problem):
        return solver_prompt(self.kind, problem)


# Tasks by name: a class, or "module:Class" for one imported only when a run names it.
TASKS = {}


def register_task(name, entry):
    """Make the task `entry` (a class or "module:Class") known as `name`."""
    TASKS[name] = entry


def task_class(name):
    """The task class TASKS names `name` (ValueError for a name it lacks)."""
    if name not in TASKS:
        raise ValueError(f"task {name!r}; expected one of {sorted(TASKS)} (the tasks registered so far)")
    entry = TASKS[name]
    if isinstance(entry, str):
        module, _, attribute = entry.partition(":")
        entry = getattr(importlib.import_module(module), attribute)
    return entry


# ---------------------------------------------------------------------------------------------------
# answer sources

class LabelledSource:
    """`verifier` and `document`: the gold answer comes with the proposal (program or document)."""

    def __init__(self, task):
        self.task = task

    def check(self, source, text):
        return self.task.check(source, text)

    def score(self, proposal, replies):
        answers = [self.task.read(r) for r in replies]
        correct = np.array([a is not None and a == proposal.gold for a in answers], np.float64)
        return Scored(correct, float(correct.mean()), proposal.gold,
                      sum(a is None for a in answers))


class MajoritySource:
    """`majority` (R-Zero): the label is the solvers' own majority answer."""

    def __init__(self, task):
        self.task = task

    def check(self, source, text):
        proposal = self.task.check(source, text)
        return Proposal(proposal.valid, proposal.reason, proposal.problem, None, proposal.checker)

    def score(self, proposal, replies):
        answers = [self.task.read(r) for r in replies]
        classes = {}
        ids = np.array([[-1 if a is None else classes.setdefault(a, len(classes)) for a in answers]])
        label_id, count, p_hat = (np.asarray(x)[0] for x in majority_vote(ids, denominator="all"))
        label = None if label_id < 0 else next(a for a, i in classes.items() if i == label_id)
        correct = ((ids[0] == label_id) & (ids[0] >= 0)).astype(np.float64)
        label_correct = None if proposal.checker is None else float(label == proposal.checker)
        return Scored(correct, float(p_hat), label, sum(a is None for a in answers), label_correct)


# answer sources by name: where a proposal's label comes from
ANSWER_SOURCES = {"verifier": LabelledSource, "document": LabelledSource, "majority": MajoritySource}


def answer_source(name, task_name):
    """The answer source `name` over the task `task_name`."""
    task = task_class(task_name)()
    if name not in ANSWER_SOURCES:
        raise ValueError(f"answer source {name!r}; expected verifier, document or majority")
    if ANSWER_SOURCES[name] is LabelledSource and task.labelled_by != name:
        raise ValueError(f"answer source {name!r} cannot label task {task_name!r}, whose gold answers "
                         f"come from {task.labelled_by!r}; use answer_source {task.labelled_by!r} or "
                         "majority")
    return ANSWER_SOURCES[name](task)
