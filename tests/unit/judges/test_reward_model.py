"""HF sequence-classification reward models: rewards against transformers'
LlamaForSequenceClassification (left- and right-padded batches), Bradley-Terry preferences through
make_judge, and bad checkpoints named."""

import json

import numpy as np
import pytest
import torch
from scipy.special import expit

from nash_jax.config import JudgeConfig
from nash_jax.judges import make_judge
from nash_jax.judges.reward_model import HFRewardModel

PROMPTS = ["the quick brown fox", "hello world", "the lazy dog jumps over the fox"]
RESPONSES = ["jumps over the lazy dog", "hello", "the quick brown fox jumps over the lazy dog world"]


def transformers_rewards(model, tokenizer, side):
    """r from transformers on the chat-templated (user, assistant) texts, padded on `side`."""
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": p},
                                            {"role": "assistant", "content": r}], tokenize=False)
             for p, r in zip(PROMPTS, RESPONSES)]
    tokenizer.padding_side = side
    batch = tokenizer(texts, add_special_tokens=False, padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any()  # the rows differ in length: padding is exercised
    with torch.no_grad():
        return model(**batch).logits[:, 0].float().numpy()


def test_reward_model_matches_transformers_with_left_and_right_padding(tiny_judge_dir):
    path, model, tokenizer = tiny_judge_dir("reward_model")
    ours = HFRewardModel.from_pretrained(path, batch_size=2).rewards(PROMPTS, RESPONSES)
    for side in ("left", "right"):
        reference = transformers_rewards(model, tokenizer, side)
        worst = float(np.abs(ours - reference).max())
        print(f"reward model, {side} padding: max |Δr| = {worst:.2e} (rewards {reference})")
        assert worst < 1e-5, (side, ours, reference)


def test_reward_model_judge_is_bradley_terry_on_its_rewards(tiny_judge_dir):
    path, _, _ = tiny_judge_dir("reward_model")
    judge = make_judge(JudgeConfig(kind="reward_model", path=str(path), batch_size=4))
    rewards = judge.rewards([PROMPTS[0]] * 3, RESPONSES)
    pref = judge.prob_matrix([PROMPTS[0]], [RESPONSES])[0]
    np.testing.assert_allclose(pref, expit(rewards[:, None] - rewards[None, :]), atol=1e-12)


def test_device_calls_hold_batch_size_rows_not_the_next_power_of_two(tiny_judge_dir):
    model = HFRewardModel.from_pretrained(tiny_judge_dir("reward_model")[0], batch_size=6)
    rows = []
    run = model.on_mesh.run
    model.on_mesh.run = lambda program, *arrays: rows.append(arrays[0].shape[0]) or run(program, *arrays)
    model.rewards([PROMPTS[0]] * 7, (RESPONSES * 3)[:7])
    assert rows == [6, 6]


def test_a_classifier_with_several_labels_or_a_causal_lm_is_refused(tiny_judge_dir, tmp_path):
    path, _, _ = tiny_judge_dir("reward_model")
    config = json.loads((path / "config.json").read_text())
    several = tmp_path / "several"
    several.mkdir()
    (several / "config.json").write_text(json.dumps({**config, "num_labels": 3,
                                                      "id2label": {"0": "a", "1": "b", "2": "c"}}))
    with pytest.raises(ValueError, match="a classifier with 3 labels; expected a reward model"):
        HFRewardModel.from_pretrained(several)
    causal = tiny_judge_dir("llm")[0]
    with pytest.raises(ValueError, match=r"not a sequence-classification reward model .*\n  "
                                         r"missing tensor 'score.weight'"):
        HFRewardModel.from_pretrained(causal)
