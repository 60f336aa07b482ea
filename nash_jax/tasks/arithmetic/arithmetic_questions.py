"""A verifiable task for real instruct models: small sums and differences asked in natural language.

"What is 14 plus 7? Reply with just the number." The answer is a function of the question, so the
verifier needs no table: `answer_of` reads the operands back from the question's wording (every
wording is one of QUESTIONS, each with a pattern). Operands are drawn so that an instruct model of
~100M parameters gets some right and some wrong (SmolLM2-135M-Instruct answers most one-digit sums,
few sums with a teen): outcomes that differ between samples are what a preference can teach from.

A response is judged by `verdicts`:
  correct    its last integer is the answer ("14 + 7 = 21" and "21" are both correct);
  formatted  it is the bare number (an optional full stop aside), as the question asks.

`prefer_correct` is the preference of the SPPO config (`judge.kind: python`): a correct response beats
a wrong one; between two correct or two wrong ones the bare number beats the rest; a tie is ½.
`verdicts` is also the config's `eval.verifier`: greedy accuracy on the held-out questions.
"""

import re

import numpy as np

MAX_FIRST = 20  # the first operand: 0 … MAX_FIRST
MAX_SECOND = 9  # the second: 0 … MAX_SECOND (a difference never goes below 0)

# (wording, operation) — {a} and {b} are the operands
QUESTIONS = (
    ("What is {a} plus {b}? Reply with just the number.", "+"),
    ("What is {a} + {b}? Reply with just the number.", "+"),
    ("Add {a} and {b}. Answer with the number only.", "+"),
    ("I have {a} apples and get {b} more. How many apples do I have? Reply with just the number.", "+"),
    ("What is {a} minus {b}? Reply with just the number.", "-"),
    ("What is {a} - {b}? Reply with just the number.", "-"),
    ("Subtract {b} from {a}. Answer with the number only.", "-"),
    ("I have {a} apples and give away {b}. How many apples are left? Reply with just the number.", "-"),
)
_PATTERNS = [(re.compile(re.escape(text.format(a="__a__", b="__b__"))
                         .replace("__a__", r"(?P<a>\d+)").replace("__b__", r"(?P<b>\d+)")), op) for text, op in QUESTIONS]
_INTEGER = re.compile(r"(?<![\d.])-?\d+")
_BARE_NUMBER = re.compile(r"-?\d+\.?")


def problems():
    """Every (a, operation, b) of the task: a + b, and a − b for b ≤ a."""
    return [(a, op, b) for a in range(MAX_FIRST + 1) for b in range(MAX_SECOND + 1) for op in "+-"
            if op == "+" or b <= a]


def prompt_texts(n, seed=0):
    """n questions about n different problems (so that held-out questions are problems never trained
    on), each in a wording of its operation, drawn by `seed`."""
    every = problems()
    if n > len(every):
        raise ValueError(f"{n} arithmetic questions asked for; the task has {len(every)} different "
                         f"problems (operands up to {MAX_FIRST} and {MAX_SECOND})")
    rng = np.random.default_rng(seed)
    wordings = {op: [text for text, o in QUESTIONS if o == op] for op in "+-"}
    out = []
    for i in rng.permutation(len(every))[:n]:
        a, op, b = every[i]
        out.append(wordings[op][rng.integers(len(wordings[op]))].format(a=a, b=b))
    return out


def problem_of(question):
    """(a, operation, b) of one of prompt_texts' questions (ValueError for any other text)."""
    for pattern, op in _PATTERNS:
        if match := pattern.fullmatch(question.strip()):
            return int(match["a"]), op, int(match["b"])
    raise ValueError(f"{question[:80]!r} is not one of the arithmetic task's questions "
                     "(nash_jax.tasks.arithmetic.arithmetic_questions.QUESTIONS)")


def answer_of(question):
    """The exact answer of one of prompt_texts' questions."""
    a, op, b = problem_of(question)
    return a + b if op == "+" else a - b


def response_answer(response):
    """The integer a response ends on (None when it holds none)."""
    numbers = _INTEGER.findall(response.replace(",", ""))
    return int(numbers[-1]) if numbers else None


def verdicts(prompts, responses):
    """One {"answer", "correct", "formatted"} per (question, response) pair."""
    out = []
    for prompt, response in zip(prompts, responses, strict=True):
        answer = answer_of(prompt)
        out.append({"answer": answer, "correct": response_answer(response) == answer,
                    "formatted": bool(_BARE_NUMBER.fullmatch(response.strip()))})
    return out


def scores(prompts, candidates):
    """[B, K]: 2 for correct, plus 1 for the bare number (the order `prefer_correct` uses)."""
    k = len(candidates[0])
    flat = verdicts([p for p in prompts for _ in range(k)], [c for cs in candidates for c in cs])
    return np.array([2 * v["correct"] + v["formatted"] for v in flat], float).reshape(len(prompts), k)


def prefer_correct(prompts, candidates):
    """[B, K, K]: P(i ≻ j) = 1 when i scores higher (correct first, the bare number second), 0 when
    lower, ½ on a tie."""
    s = scores(prompts, candidates)
    return 0.5 + 0.5 * np.sign(s[:, :, None] - s[:, None, :])
