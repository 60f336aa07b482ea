"""Proposer–solver arithmetic in plain words, for a real instruct model (`proposer_solver.task.name:
arithmetic_chat`; configs/smollm2_proposer_solver.yaml).

The problems, the seeds, the held-out set and the exact verifier are those of the tiny task
(tasks/arithmetic/arithmetic.py); only the words around them change, and they reach the model through its own
chat template:

  proposer  "Example problem: 3 + 4 * 2\nWrite one more problem like it with other numbers. Only
            write the problem." (of three wordings tried on SmolLM2-135M-Instruct, the one whose
            replies most often hold a valid problem and end within 20 tokens: 25 % at temperature 0.7)
  solver    "What is 5 + 6 * 2? Reply with just the number."

An instruct model wraps its problem in words ("Sure! What is 5 + 6 * 2?", "5 + 6 * 2 = 17"), so
`problem_text` reads the first arithmetic expression out of the reply (× and ÷ read as * and /) and
the grammar checks that, as it checks the tiny model's bare proposals: a reply with no expression is
invalid ("no arithmetic expression in the reply"), and so is one the grammar or its bounds refuse,
each with its reason. A solver's answer is the last integer of its reply ("5 + 6 * 2 = 17" gives 17),
as in the SPPO task (tasks/arithmetic/arithmetic_questions.py).
"""

import re

from nash_jax.tasks.arithmetic import arithmetic
from nash_jax.selfplay.answer_sources import Proposal
from nash_jax.tasks.arithmetic.arithmetic_questions import response_answer

# digits and brackets at both ends, the grammar's characters between, on one line
_EXPRESSION = re.compile(r"[(\d][\d \t()+\-*/]*[\d)]")
_SYMBOLS = str.maketrans({"×": "*", "÷": "/", "−": "-"})


def problem_text(reply):
    """The first arithmetic expression (one with an operator) in a proposer's reply, or None."""
    for match in _EXPRESSION.finditer(reply.translate(_SYMBOLS)):
        if any(op in match.group(0) for op in arithmetic.OPERATORS):
            return match.group(0).strip()
    return None


class ArithmeticChatTask:
    name, kind, labelled_by = "arithmetic_chat", "seed", "verifier"

    def proposer_prompt(self, source):
        return (f"Example problem: {source.text}\nWrite one more problem like it with other numbers. "
                "Only write the problem.")

    def solver_prompt(self, problem):
        return f"What is {problem}? Reply with just the number."

    def check(self, source, text):
        expression = problem_text(text)
        if expression is None:
            return Proposal(False, "no arithmetic expression in the reply")
        parsed = arithmetic.parse_problem(expression)
        if not parsed.ok:
            return Proposal(False, parsed.reason)
        return Proposal(True, "", parsed.canonical, parsed.answer, parsed.answer)

    def read(self, reply):
        return response_answer(reply)
