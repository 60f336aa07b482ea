"""The arithmetic task of proposer-solver self-play: integer expressions checked and solved by a program.

A proposer writes a problem in a small grammar (whitespace optional):

    expr   := term (("+" | "-") term)*
    term   := factor (("*" | "/") factor)*
    factor := NUMBER | "(" expr ")"

`parse_problem` is a recursive-descent parser, never `eval`: it refuses (with a reason) text outside the
grammar, text longer than `max_chars`, nesting deeper than `max_depth`, a literal or any intermediate
value beyond ±`max_intermediate`, division by zero or with a remainder, and a result outside
[0, `max_answer`]. Bounds are checked before each operation, so hostile input costs time linear in its
(bounded) length. A valid problem's exact answer is the parser's value.

`extract_answer` reads a solver's reply tolerantly ("11", "answer: 11", "= 11 ." all give 11; the first
integer wins) and returns None when there is none, which the recipe counts as unparsed.

`random_problem` draws the seed tasks, the held-out anchor set and the warm start's demonstrations: one
or two operations on single digits, harder the more multiplication it holds.
"""

import re
from dataclasses import dataclass

import numpy as np

from nash_jax.judges.base import RewardModel
from nash_jax.selfplay.answer_sources import Proposal, TermsPrompts

MAX_ANSWER = 99  # answers are written as one number word of the task's vocabulary
MAX_INTERMEDIATE = 10_000
MAX_DEPTH = 6
MAX_CHARS = 120
OPERATORS = ("+", "-", "*", "/")
_TOKEN = re.compile(r"\s*(\d+|[-+*/()=?]|\S)")
_INTEGER = re.compile(r"(?<![\d])-?\d+")


class InvalidProblem(ValueError):
    """A proposal the grammar or the bounds refuse; str(err) is the reason."""


@dataclass(frozen=True)
class Parsed:
    ok: bool
    answer: int | None  # the exact value when ok
    reason: str  # "" when ok
    canonical: str  # the problem's tokens joined by single spaces ("" when malformed)


def _tokens(text):
    tokens = []
    for match in _TOKEN.finditer(text):
        tokens.append(match.group(1))
    return tokens


class _Parser:
    def __init__(self, tokens, max_depth, max_intermediate):
        self.tokens, self.i = tokens, 0
        self.max_depth, self.bound = max_depth, max_intermediate

    def peek(self):
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self):
        token = self.peek()
        self.i += 1
        return token

    def checked(self, value):
        if abs(value) > self.bound:
            raise InvalidProblem(f"intermediate value beyond ±{self.bound}")
        return value

    def expr(self, depth):
        value = self.term(depth)
        while self.peek() in ("+", "-"):
            op = self.take()
            right = self.term(depth)
            value = self.checked(value + right if op == "+" else value - right)
        return value

    def term(self, depth):
        value = self.factor(depth)
        while self.peek() in ("*", "/"):
            op = self.take()
            right = self.factor(depth)
            if op == "*":
                value = self.checked(value * right)  # both factors ≤ bound: the product is small
            elif right == 0:
                raise InvalidProblem("division by zero")
            elif value % right:
                raise InvalidProblem("inexact division")
            else:
                value = self.checked(value // right)
        return value

    def factor(self, depth):
        token = self.take()
        if token is None:
            raise InvalidProblem("unexpected end of problem")
        if token == "(":
            if depth + 1 > self.max_depth:
                raise InvalidProblem(f"nesting deeper than {self.max_depth}")
            value = self.expr(depth + 1)
            if self.take() != ")":
                raise InvalidProblem("unbalanced parenthesis")
            return value
        if token.isdigit():
            if len(token) > len(str(self.bound)) or int(token) > self.bound:
                raise InvalidProblem(f"number beyond ±{self.bound}")
            return int(token)
        raise InvalidProblem(f"unexpected {token!r}")


def parse_problem(text, *, max_answer=MAX_ANSWER, max_intermediate=MAX_INTERMEDIATE,
                  max_depth=MAX_DEPTH, max_chars=MAX_CHARS, min_operations=1):
    """Parsed(ok, exact answer, reason, canonical text) of a proposed problem.

    Tolerated around the expression: a leading "problem:" and a trailing "=" or "= ?". A problem needs
    at least `min_operations` operators: a bare number is its own answer, and a proposer rewarded for
    what solvers do with its problems soon learns to write bare numbers that solvers learn to copy."""
    if not isinstance(text, str):
        return Parsed(False, None, "not text", "")
    body = text.strip()
    if body.startswith("problem:"):
        body = body[len("problem:"):]
    if len(body) > max_chars:
        return Parsed(False, None, f"longer than {max_chars} characters", "")
    tokens = _tokens(body)
    while tokens and tokens[-1] in ("=", "?"):
        tokens.pop()
    if not tokens:
        return Parsed(False, None, "empty problem", "")
    parser = _Parser(tokens, max_depth, max_intermediate)
    try:
        value = parser.expr(0)
        if parser.peek() is not None:
            raise InvalidProblem(f"unexpected {parser.peek()!r} after the expression")
        if sum(t in OPERATORS for t in tokens) < min_operations:
            raise InvalidProblem(f"fewer than {min_operations} operation(s)")
        if not 0 <= value <= max_answer:
            raise InvalidProblem(f"answer {value} outside [0, {max_answer}]")
    except InvalidProblem as err:
        return Parsed(False, None, str(err), "")
    return Parsed(True, value, "", " ".join(tokens))


def extract_answer(text, *, max_digits=6):
    """The first integer in a solver's reply, or None (no integer, or one longer than max_digits)."""
    match = _INTEGER.search(text or "")
    if match is None or len(match.group(0).lstrip("-")) > max_digits:
        return None
    return int(match.group(0))


class ArithmeticVerifier(RewardModel):
    """1 when the reply's answer equals the problem's exact value, else 0; the problems must be valid
    (a recipe checks proposals first). A RewardModel, so any recipe that reads scalar rewards can use it."""

    def _rewards(self, problems, replies):
        out = []
        for i, (problem, reply) in enumerate(zip(problems, replies)):
            parsed = parse_problem(problem)
            if not parsed.ok:
                raise ValueError(f"problem {i} {problem!r} is not a valid arithmetic problem "
                                 f"({parsed.reason}); expected a checked proposal")
            out.append(float(extract_answer(reply) == parsed.answer))
        return out


# ---------------------------------------------------------------------------------------------------
# problems drawn by a program: seeds, the held-out set, demonstrations

SHAPES = ("a + b", "a - b", "a * b", "a + b + c", "a * b + c", "a * b - c")
# Share of each shape in drawn problems: mostly additions, which a short warm start learns best.
SHAPE_WEIGHTS = np.array([0.3, 0.2, 0.15, 0.15, 0.1, 0.1])


def random_problem(rng, weights=SHAPE_WEIGHTS):
    """(text, answer) of a problem of a random shape on digits 0-9, valid under parse_problem."""
    while True:
        shape = SHAPES[rng.choice(len(SHAPES), p=weights / weights.sum())]
        a, b, c = (int(x) for x in rng.integers(0, 10, size=3))
        if shape == "a - b" and a < b:
            a, b = b, a
        text = shape.replace("a", str(a)).replace("b", str(b)).replace("c", str(c))
        parsed = parse_problem(text)
        if parsed.ok:
            return parsed.canonical, parsed.answer


def random_problems(n, seed, exclude=()):
    """n distinct problems (text, answer) from `seed`, none of whose texts is in `exclude`."""
    rng = np.random.default_rng(seed)
    seen, out = set(exclude), []
    for _ in range(100 * n):
        text, answer = random_problem(rng)
        if text not in seen:
            seen.add(text)
            out.append((text, answer))
            if len(out) == n:
                return out
    raise ValueError(f"could not draw {n} distinct problems (only {len(out)}); lower the count")


def malformed_problem(rng):
    """A proposal outside the grammar or its bounds, as an untrained proposer writes them."""
    a, b = (int(x) for x in rng.integers(0, 10, size=2))
    return [f"{a} +", f"( {a} * {b}", f"{a} / 0", f"{a} {b}", f"99 * 99 * {b + 2}"][rng.integers(5)]


class ArithmeticTask(TermsPrompts):
    """The proposer–solver task (`proposer_solver.task.name: arithmetic`): a proposal is valid when
    the grammar parses it, its gold answer is the parser's value, a reply's answer its first integer."""

    name, kind, labelled_by = "arithmetic", "seed", "verifier"

    def check(self, source, text):
        parsed = parse_problem(text)
        if not parsed.ok:
            return Proposal(False, parsed.reason)
        return Proposal(True, "", parsed.canonical, parsed.answer, parsed.answer)

    def read(self, reply):
        return extract_answer(reply)
