"""The LLM judge: label logits against transformers on the real SmolLM2-135M-Instruct, both orders
combined antisymmetrically, one shared prefill per prompt equal to recomputing every pair, the same
programs across calls, position inconsistency, and errors before anything runs."""

import numpy as np
import pytest
import torch
import transformers

from nash_jax import parallel
from nash_jax.config import JudgeConfig
from nash_jax.judges import check_judge, make_judge
from nash_jax.judges.llm import DEFAULT_TEMPLATE, LLMJudge
from tests.unit.judges.tiny_decoders import LABELS, WORDS

PROMPTS = ["What is the capital of France?", "Name a prime number greater than ten, and say why."]
CANDIDATES = [["Paris.", "London is the capital.", "It is Paris, a city on the Seine."],
              ["11", "Twelve, because it is even.", "13 is prime: no divisor but 1 and itself."]]
TINY_TEMPLATE = "{prompt} over {a} the {b} world"


def words(rng, n):
    return " ".join(rng.choice(WORDS, n))


@pytest.fixture(scope="module")
def smol_judge(smollm2_dir):
    return LLMJudge.from_pretrained(smollm2_dir, batch_size=12)


def transformers_margins(path, prompts, candidates, pairs):
    """ℓ and the logit scale (max |logit|) from transformers on the chat-templated texts, built here."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    a, b = (tokenizer(label, add_special_tokens=False)["input_ids"][0] for label in ("A", "B"))
    margins, scale = np.zeros((len(prompts), len(pairs))), 0.0
    for n, (prompt, cands) in enumerate(zip(prompts, candidates)):
        for p, (i, j) in enumerate(pairs):
            question = DEFAULT_TEMPLATE.format(prompt=prompt, a=cands[i], b=cands[j])
            text = tokenizer.apply_chat_template([{"role": "user", "content": question}],
                                                 tokenize=False, add_generation_prompt=True)
            ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
            with torch.no_grad():
                logits = model(ids).logits[0, -1].float()
            margins[n, p] = float(logits[a] - logits[b])
            scale = max(scale, float(logits.abs().max()))
    return margins, scale


def test_llm_judge_label_logits_match_transformers_on_smollm2(smol_judge, smollm2_dir):
    pairs, rows = smol_judge.pair_rows(PROMPTS, CANDIDATES)
    shared = smol_judge.margins(rows)
    smol_judge.shared_prefill = False
    try:
        scratch = smol_judge.margins(rows)
    finally:
        smol_judge.shared_prefill = True
    reference, scale = transformers_margins(smollm2_dir, PROMPTS, CANDIDATES, pairs)
    worst = float(np.abs(shared - reference).max())
    worst_scratch = float(np.abs(scratch - reference).max())
    print(f"SmolLM2 judge: max |Δℓ| shared prefill {worst:.2e}, from scratch {worst_scratch:.2e}, "
          f"logit scale {scale:.1f}")
    assert worst <= 1e-4 * scale and worst_scratch <= 1e-4 * scale, (worst, worst_scratch, scale)


def test_llm_judge_matrices_are_exactly_antisymmetric_on_smollm2(smol_judge):
    pref, notes = smol_judge.judgments(PROMPTS, CANDIDATES)
    np.testing.assert_array_equal(pref + np.swapaxes(pref, 1, 2), 1.0)
    np.testing.assert_array_equal(pref[:, [0, 1, 2], [0, 1, 2]], 0.5)
    assert notes["position_inconsistency"].shape == (2,)
    print(f"SmolLM2 position inconsistency on the test prompts: {notes['position_inconsistency']}")


def test_shared_prefill_equals_from_scratch_with_the_same_programs_across_calls(tiny_judge_dir):
    path, _, _ = tiny_judge_dir("llm")
    rng = np.random.default_rng(0)
    judge = LLMJudge.from_pretrained(path, template=TINY_TEMPLATE, labels=LABELS, batch_size=24)
    scratch = LLMJudge.from_pretrained(path, template=TINY_TEMPLATE, labels=LABELS, batch_size=24,
                                       shared_prefill=False)
    for call in range(3):  # prompts of 30–45 words, responses of 3–8: one head and one rest bucket
        prompts = [words(rng, rng.integers(30, 45)) for _ in range(3)]
        candidates = [[words(rng, rng.integers(3, 8)) for _ in range(4)] for _ in prompts]
        _, rows = judge.pair_rows(prompts, candidates)
        diff = float(np.abs(judge.margins(rows) - scratch.margins(rows)).max())
        assert diff < 1e-5, f"call {call}: max |ℓ shared − ℓ from scratch| = {diff}"
        if call == 0:
            programs = judge.compiled_programs()
    assert judge.compiled_programs() == programs == 1, (programs, judge.compiled_programs())
    # on the 8 test devices (the run's mesh, through make_judge): the same margins
    config = JudgeConfig(kind="llm", path=str(path), template=TINY_TEMPLATE, labels=list(LABELS))
    sharded = make_judge(config, parallel.make_mesh())
    diff = float(np.abs(sharded.margins(rows) - scratch.margins(rows)).max())
    assert diff < 1e-5, f"8-device mesh: max |Δℓ| = {diff}"


def test_device_calls_hold_at_most_batch_size_pairs_in_one_shape(tiny_judge_dir):
    judge = LLMJudge.from_pretrained(tiny_judge_dir("llm")[0], template=TINY_TEMPLATE, labels=LABELS,
                                     batch_size=60)
    rows = []
    run = judge.on_mesh.run
    judge.on_mesh.run = lambda program, *arrays: rows.append(arrays[2].shape[0]) or run(program, *arrays)
    rng = np.random.default_rng(0)
    for n in (7, 3):  # K = 4: 12 pairs a prompt, 5 prompts (60 pairs) a call, not 8 (96)
        judge.prob_matrix([words(rng, 5) for _ in range(n)],
                          [[words(rng, 3) for _ in range(4)] for _ in range(n)])
    assert rows == [60, 60, 60]


def test_position_inconsistency_is_measured_on_a_judge_that_prefers_the_first_slot(tiny_judge_dir):
    rng = np.random.default_rng(1)
    prompts = [words(rng, 12) for _ in range(2)]
    candidates = [[words(rng, 4) for _ in range(3)] for _ in prompts]
    biased = LLMJudge.from_pretrained(tiny_judge_dir("first_slot")[0], template=TINY_TEMPLATE,
                                      labels=LABELS)
    _, rows = biased.pair_rows(prompts, candidates)
    assert (biased.margins(rows) > 0).all()  # the rigged judge picks slot A whatever it is shown
    pref, notes = biased.judgments(prompts, candidates)
    np.testing.assert_array_equal(notes["position_inconsistency"], [1.0, 1.0])
    np.testing.assert_array_equal(pref + np.swapaxes(pref, 1, 2), 1.0)
    # an unrigged judge: the share of the pairs whose two orders have margins of the same sign
    judge = LLMJudge.from_pretrained(tiny_judge_dir("llm")[0], template=TINY_TEMPLATE, labels=LABELS)
    pairs, rows = judge.pair_rows(prompts, candidates)
    ell = dict(zip(pairs, judge.margins(rows).T))
    expected = np.mean([ell[i, j] * ell[j, i] > 0 for i, j in pairs if i < j], axis=0)
    np.testing.assert_allclose(judge.judgments(prompts, candidates)[1]["position_inconsistency"],
                               expected)


def test_bad_templates_labels_and_lengths_are_refused_before_anything_runs(tiny_judge_dir):
    path = tiny_judge_dir("llm")[0]
    with pytest.raises(ValueError, match=r"judge.template: lacks \{b\}; expected a question with"):
        check_judge(JudgeConfig(kind="llm", path=str(path), template="{prompt}: {a} or not?"))
    with pytest.raises(ValueError, match=r"unknown fields \['c'\]"):
        LLMJudge.from_pretrained(path, template="{prompt} {a} {b} {c}", labels=LABELS)
    with pytest.raises(ValueError, match=r"both start with token .*expected labels whose first tokens"):
        LLMJudge.from_pretrained(path, template=TINY_TEMPLATE, labels=("fox", "fox jumps"))
    judge = LLMJudge.from_pretrained(path, template=TINY_TEMPLATE, labels=LABELS, max_tokens=12)
    with pytest.raises(ValueError, match=r"prompt 1, responses 0 and 1 has 1[3-9] tokens; "
                                         r"judge.max_tokens=12"):
        judge.prob_matrix(["the", "the quick brown fox jumps"], [["dog", "fox"], ["dog", "fox"]])
    assert judge.compiled_programs() == 0 and judge.pairs_computed == 0
