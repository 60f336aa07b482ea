"""configs/smollm2_sppo.yaml shortened to minutes: SPPO on the real SmolLM2-135M-Instruct through the
CLI, on one device as a user runs it. The full run's figures are in README ("A real model on a
laptop"); here: the pipeline and the report's fields, that training uses the sampled token ids, that a
response cut at max_new_tokens is recorded as cut, that a run killed during generation resumes to the
same parameters, and that the held-out responses re-decode the same in transformers."""

import json
import signal

import numpy as np
import pytest

from nash_jax import runs
from nash_jax.tasks.arithmetic import arithmetic_questions
from tests.recipes.conftest import CONFIGS, assert_same_parameters, run_cli

pytestmark = pytest.mark.long

MAX_NEW_TOKENS = 8
EVAL_PROMPTS = 8
SHORTENED = ("sppo.iterations=1", "data.path=builtin:arithmetic:24", f"eval.prompts={EVAL_PROMPTS}",
             "sampling.prompts_per_batch=8", f"sampling.max_new_tokens={MAX_NEW_TOKENS}",
             f"eval.max_new_tokens={MAX_NEW_TOKENS}", "train.batch_size=8", "train.epochs=1",
             "train.checkpoint_every=2")


def shortened(model_dir):
    return (*SHORTENED, f"model.path={model_dir}", f"eval.second_judge.path={model_dir}")


@pytest.fixture(scope="module")
def finished_run(smollm2_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("smollm2_sppo") / "run"
    result = run_cli(CONFIGS / "smollm2_sppo.yaml", run_dir, one_device=True, args=shortened(smollm2_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir, result.stdout


def heldout_rows(run_dir):
    return [json.loads(line) for line in (run_dir / "eval" / "heldout.jsonl").read_text().splitlines()]


def test_the_report_holds_heldout_accuracy_per_iterate_and_every_response(finished_run):
    run_dir, stdout = finished_run
    report = json.loads((run_dir / "report.json").read_text())
    rows = heldout_rows(run_dir)
    assert [r["iterate"] for r in rows] == ["pi_0"] * EVAL_PROMPTS + ["pi_1"] * EVAL_PROMPTS
    for row in rows:
        assert set(row) >= {"iterate", "prompt", "answer", "response", "correct", "finished"}
        assert row["answer"] == arithmetic_questions.answer_of(row["prompt"])  # the user message
        assert row["correct"] == (arithmetic_questions.response_answer(row["response"]) == row["answer"])
    for i, label in enumerate(("pi_0", "pi_1")):
        assert report["heldout_accuracy"][i] == pytest.approx(
            np.mean([r["correct"] for r in rows if r["iterate"] == label]))
        assert 0 <= report["heldout_format_rate"][i] <= 1
    assert f"heldout accuracy {report['heldout_accuracy'][-1]:.4f}" in stdout
    # held-out questions are problems never trained on
    trained = runs.read_table(run_dir / "iter_0" / "prompts.parquet")["prompt"]
    assert not ({arithmetic_questions.problem_of(p) for p in trained}
                & {arithmetic_questions.problem_of(r["prompt"]) for r in rows})
    # the model judged its own iterates as the second judge, both orders
    second = np.asarray(report["win_rate_table_second_judge"])
    np.testing.assert_allclose(second + second.T, 1.0, atol=1e-6)


def test_training_uses_the_sampled_ids_and_cut_responses_are_marked(finished_run, smollm2_dir):
    run_dir, _ = finished_run
    samples = runs.read_table(run_dir / "iter_0" / "samples.parquet")
    examples = runs.read_table(run_dir / "iter_0" / "examples.parquet")
    sampled = {(tuple(p), tuple(r)) for p, rs in zip(samples["prompt_ids"], samples["response_ids"])
               for r in rs}
    assert all((tuple(p), tuple(r)) in sampled
               for p, r in zip(examples["prompt_ids"], examples["response_ids"]))
    eos = json.loads((smollm2_dir / "generation_config.json").read_text())["eos_token_id"]
    finished = [f for fs in samples["finished"] for f in fs]
    ids = [r for rs in samples["response_ids"] for r in rs]
    assert any(finished) and not all(finished)  # both kinds occur at 8 new tokens
    for ended, response in zip(finished, ids):
        if ended:
            assert response[-1] == eos and len(response) <= MAX_NEW_TOKENS
        else:
            assert eos not in response and len(response) == MAX_NEW_TOKENS


def test_a_run_killed_during_generation_resumes_to_the_same_parameters(finished_run, smollm2_dir,
                                                                       tmp_path):
    """Killed after the first of two batches of samples, the rerun redoes the unfinished stage and
    trains the same parameters on the same samples and judgments. It is killed again at the first
    batch of the evaluation (the report's fields are the other tests'): its iterate is what this test
    compares."""
    reference_dir, _ = finished_run
    run_dir = tmp_path / "killed"
    args = shortened(smollm2_dir)
    for crash_at in ("iter_0/generate:batch=1", "eval/samples_0:batch=1"):
        killed = run_cli(CONFIGS / "smollm2_sppo.yaml", run_dir, crash_at, one_device=True, args=args)
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert f"resuming {run_dir}" in killed.stdout + killed.stderr
    for name in ("samples", "judgments"):
        assert runs.read_table(run_dir / "iter_0" / f"{name}.parquet") == runs.read_table(
            reference_dir / "iter_0" / f"{name}.parquet"), name
    assert_same_parameters(run_dir / "iter_0" / "policy", reference_dir / "iter_0" / "policy")


def test_heldout_responses_redecode_the_same_in_transformers(finished_run):
    import torch
    import transformers

    run_dir, _ = finished_run
    policy = run_dir / "iter_0" / "policy"
    tokenizer = transformers.AutoTokenizer.from_pretrained(policy)
    model = transformers.AutoModelForCausalLM.from_pretrained(policy, torch_dtype=torch.float32)
    for row in [r for r in heldout_rows(run_dir) if r["iterate"] == "pi_1"][:3]:
        text = tokenizer.apply_chat_template([{"role": "user", "content": row["prompt"]}],
                                             add_generation_prompt=True, tokenize=False)
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=MAX_NEW_TOKENS, do_sample=False)
        assert tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True) == row["response"]
