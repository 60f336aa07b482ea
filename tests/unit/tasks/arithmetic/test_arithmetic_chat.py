"""Proposer–solver arithmetic in plain words (tasks/arithmetic/arithmetic_chat.py): the expression read out of an
instruct model's wordy proposal, checked by the grammar; the solver's answer its reply's last integer;
the task found by name; its prompts through SmolLM2's chat template."""

import pytest

from nash_jax import data
from nash_jax.models.tokenizer import load_tokenizer
from nash_jax.selfplay import answer_sources
from nash_jax.tasks.arithmetic.arithmetic_chat import ArithmeticChatTask, problem_text

SEED = answer_sources.Source("seed-0", "seed", "3 + 4 * 2")


@pytest.mark.parametrize("reply, expression", [
    ("5 + 6 * 2", "5 + 6 * 2"), ("Sure! What is 5 + 6 * 2?", "5 + 6 * 2"),
    ("5 + 6 * 2 = 17", "5 + 6 * 2"), ("1. 8 - 3\n2. 9 + 1", "8 - 3"), ("(2 + 3) × 4", "(2 + 3) * 4"),
    ("Problem: 12 ÷ 4 = ?", "12 / 4"), ("The answer is 7.", None), ("no numbers here", None)])
def test_the_first_expression_of_a_reply_is_the_problem(reply, expression):
    assert problem_text(reply) == expression


def test_a_proposal_is_checked_by_the_grammar_with_its_reason():
    task = ArithmeticChatTask()
    ok = task.check(SEED, "Here is one: 7 + 8 * 2?")
    assert ok.valid and ok.problem == "7 + 8 * 2" and ok.gold == 23
    assert task.check(SEED, "Try this puzzle about apples.").reason == "no arithmetic expression in the reply"
    assert task.check(SEED, "3 - 9").reason == "answer -6 outside [0, 99]"
    assert task.check(SEED, "7 / 2").reason == "inexact division"


def test_the_solvers_answer_is_the_last_integer_of_its_reply():
    task = ArithmeticChatTask()
    assert task.read("5 + 6 * 2 = 17") == 17
    assert task.read("The answer is 17.") == 17
    assert task.read("I do not know") is None


def test_the_task_is_found_by_name_under_the_verifier_and_majority_vote():
    assert isinstance(answer_sources.answer_source("verifier", "arithmetic_chat").task, ArithmeticChatTask)
    assert isinstance(answer_sources.answer_source("majority", "arithmetic_chat").task, ArithmeticChatTask)
    with pytest.raises(ValueError, match="cannot label"):
        answer_sources.answer_source("document", "arithmetic_chat")


def test_on_smollm2_both_prompts_are_plain_words_in_its_chat_template(smollm2_dir):
    tok, task = load_tokenizer(smollm2_dir), ArithmeticChatTask()
    prompts = [task.proposer_prompt(SEED), task.solver_prompt("5 + 6 * 2")]
    assert prompts[1] == "What is 5 + 6 * 2? Reply with just the number."
    assert "3 + 4 * 2" in prompts[0] and "role:" not in prompts[0]
    ids, kept, _ = data.encode_prompts(tok, prompts, max_tokens=64, where="test")
    assert kept == [0, 1]
    for prompt, row in zip(prompts, ids):
        assert tok.decode(row).endswith(f"{prompt}<|im_end|>\n<|im_start|>assistant\n")
