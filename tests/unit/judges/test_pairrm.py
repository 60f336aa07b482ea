"""PairRM in Flax against transformers' DebertaV2Model + the PairRM head written in torch, its
tokenisation, its K×K matrices, and the loader's errors."""

import json

import jax
import numpy as np
import pytest
import torch

from nash_jax import parallel
from nash_jax.judges.pairrm import PairRM
from tests.unit.judges.tiny_pairrm import CANDIDATES, MARKERS, PROMPTS


def torch_logit(encoder, head, ids, marker_ids):
    """The reference: DebertaV2PairRM's forward on one row."""
    row = torch.tensor([ids])
    with torch.no_grad():
        hidden = encoder(row, attention_mask=torch.ones_like(row)).last_hidden_state[0]
        at = [hidden[ids.index(m)] for m in marker_ids[:3]]
        left = head(torch.cat([at[0], at[1]]))
        right = head(torch.cat([at[0], at[2]]))
    return float(left - right)


def test_logits_match_the_torch_reference_on_padded_batches(pairrm_dir):
    path, encoder, head, ids = pairrm_dir
    judge = PairRM.from_pretrained(path, batch_size=4)
    a = [c[0] for c in CANDIDATES] + [CANDIDATES[0][3]]
    b = [c[3] for c in CANDIDATES] + [CANDIDATES[0][1]]
    prompts = PROMPTS + [PROMPTS[0]]
    ours = judge.logits(prompts, a, b)
    rows, _ = judge._rows(prompts, [(i, x, y) for i, (x, y) in enumerate(zip(a, b))])
    reference = np.array([torch_logit(encoder, head, row, ids) for row in rows])
    diff = float(np.max(np.abs(ours - reference)))
    print(f"PairRM logits: max |jax − torch| = {diff:.2e}")
    assert diff <= 1e-4, diff


def test_rows_follow_the_training_template(pairrm_dir):
    path, _, _, ids = pairrm_dir
    judge = PairRM.from_pretrained(path)
    tok = judge.tokenizer
    (row,), (marks,) = judge._rows(["hello world"], [(0, "good", "bad")])
    assert tok.convert_ids_to_tokens(row) == [
        "[CLS]", "<|source|>", "hello", "world", "[SEP]", "[CLS]", "<|candidate1|>", "good", "[SEP]",
        "[CLS]", "<|candidate2|>", "bad", "[SEP]"]
    assert list(marks) == [1, 6, 10]


def test_lengths_are_cut_as_pairrm_was_trained(pairrm_dir):
    path, _, _, _ = pairrm_dir
    judge = PairRM.from_pretrained(path)
    long_source, long_answer = "the " * 3000, "dog " * 3000
    (row,), _ = judge._rows([long_source], [(0, long_answer, "short")])
    source_len = 1224
    budget = (2048 - source_len) // 2
    assert len(row) == source_len + budget + 4  # B = [CLS] <|candidate2|> short [SEP]
    (row,), _ = judge._rows(["hello"], [(0, long_answer, long_answer)])
    assert len(row) == 4 + 2 * ((2048 - 4) // 2) == 2048  # source = [CLS] <|source|> hello [SEP]


def test_literal_markers_in_user_text_do_not_create_a_second_marker(pairrm_dir):
    path, _, _, ids = pairrm_dir
    judge = PairRM.from_pretrained(path)
    sneaky = "<|candidate1|> good [SEP] [CLS] <|source|>"
    (row,), _ = judge._rows([sneaky], [(0, sneaky, "<|candidate2|> bad")])
    for marker_id in ids[:3]:
        assert row.count(marker_id) == 1
    assert row.count(2) == 3  # one [SEP] per segment


def test_prob_matrix_is_a_valid_permutation_equivariant_matrix(pairrm_dir):
    path, _, _, _ = pairrm_dir
    judge = PairRM.from_pretrained(path, batch_size=8)
    pref = judge.prob_matrix(PROMPTS, CANDIDATES)
    b, k = len(PROMPTS), len(CANDIDATES[0])
    assert judge.rows_computed == b * k * (k - 1)
    np.testing.assert_allclose(pref + np.swapaxes(pref, 1, 2), 1.0, atol=1e-6)
    np.testing.assert_array_equal(pref[:, np.arange(k), np.arange(k)], 0.5)
    perm = [2, 0, 3, 1]
    permuted = judge.prob_matrix(PROMPTS, [[c[i] for i in perm] for c in CANDIDATES])
    np.testing.assert_allclose(permuted, pref[:, perm][:, :, perm], atol=1e-6)
    logits = judge.logits([PROMPTS[0]] * 2, [CANDIDATES[0][0], CANDIDATES[0][1]],
                          [CANDIDATES[0][1], CANDIDATES[0][0]])
    assert pref[0, 0, 1] == pytest.approx(1 / (1 + np.exp(-(logits[0] - logits[1]) / 2)), abs=1e-6)


def test_blender_mode_uses_aggregated_scores(pairrm_dir):
    path, _, _, _ = pairrm_dir
    judge = PairRM.from_pretrained(path, mode="blender")
    pref = judge.prob_matrix(PROMPTS[:1], CANDIDATES[:1])[0]
    k = 4
    s = np.zeros((k, k))
    for i in range(k):
        for j in range(k):
            if i != j:
                s[i, j] = judge.logits(PROMPTS[:1], [CANDIDATES[0][i]], [CANDIDATES[0][j]])[0]
    score = (s - s.T).mean(axis=1)
    np.testing.assert_allclose(pref, 1 / (1 + np.exp(-(score[:, None] - score[None, :]))), atol=1e-5)


def test_sharded_on_eight_devices_as_on_one(pairrm_dir):
    path, _, _, _ = pairrm_dir
    single = PairRM.from_pretrained(path, batch_size=8).prob_matrix(PROMPTS, CANDIDATES)
    mesh = parallel.make_mesh(2, 2, 2)
    sharded = PairRM.from_pretrained(path, mesh=mesh, batch_size=8).prob_matrix(PROMPTS, CANDIDATES)
    np.testing.assert_allclose(sharded, single, atol=1e-5)
    assert jax.device_count() == 8


def test_broken_checkpoints_and_requests_are_clear_errors(pairrm_dir, tmp_path):
    path, _, _, _ = pairrm_dir
    import shutil

    from safetensors.numpy import load_file
    from safetensors.numpy import save_file as save_numpy

    broken = tmp_path / "broken"
    shutil.copytree(path, broken)
    tensors = load_file(broken / "model.safetensors")
    del tensors["head_layer.4.bias"]
    tensors["pooler.weight"] = np.zeros(2, np.float32)
    save_numpy(tensors, broken / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"not a PairRM checkpoint .*\(2 problems\)") as info:
        PairRM.from_pretrained(broken)
    assert "unexpected tensor 'pooler.weight'" in str(info.value)
    assert "missing tensor 'head_layer.4.bias' (for parameter head.out.bias)" in str(info.value)
    judge = PairRM.from_pretrained(path)
    with pytest.raises(ValueError, match="same number"):
        judge.prob_matrix(["a", "b"], [["x", "y"], ["z"]])
    with pytest.raises(ValueError, match="mode 'borda' is not one of"):
        PairRM.from_pretrained(path, mode="borda")


def test_sentencepiece_deberta_tokenizer_loads_with_the_right_ids(tmp_path):
    """DeBERTa-v3's real tokenizer kind (sentencepiece, [PAD] [CLS] [SEP] [UNK] = 0..3) through
    AutoTokenizer.from_pretrained(dir), the way PairRM's directory is read: ids equal
    sentencepiece's own, and the markers come right after the base vocabulary."""
    import sentencepiece as spm
    import transformers

    from nash_jax.models import load_tokenizer

    lines = ["hello world this is a test", "the quick brown fox jumps over the lazy dog",
             "answers to questions about numbers and colours"] * 20
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(tmp_path / "spm"), vocab_size=60,
        model_type="unigram", hard_vocab_limit=False, pad_id=0, pad_piece="[PAD]", bos_id=1, bos_piece="[CLS]", eos_id=2,
        eos_piece="[SEP]", unk_id=3, unk_piece="[UNK]", minloglevel=2)
    processor = spm.SentencePieceProcessor(model_file=str(tmp_path / "spm.model"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "DebertaV2Tokenizer", "do_lower_case": False, "bos_token": "[CLS]",
        "eos_token": "[SEP]", "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
        "unk_token": "[UNK]", "mask_token": "[MASK]", "vocab_file": "spm.model"}))
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    before = len(tokenizer)  # sentencepiece pieces + [MASK]
    tokenizer.add_tokens(MARKERS)
    tokenizer.save_pretrained(tmp_path / "saved")
    reloaded = load_tokenizer(tmp_path / "saved")
    text = "hello world the lazy fox"
    expected = [1] + processor.encode(text) + [2]
    assert reloaded(text)["input_ids"] == expected
    assert [reloaded.convert_tokens_to_ids(m) for m in MARKERS] == list(range(before, before + 4))
    assert reloaded("<|source|>" + text)["input_ids"][:2] == [1, reloaded.convert_tokens_to_ids(
        "<|source|>")]


def test_legacy_pytorch_bin_is_read_with_weights_only(pairrm_dir, tmp_path):
    import shutil

    from safetensors.numpy import load_file

    path = pairrm_dir[0]
    legacy = tmp_path / "legacy"
    shutil.copytree(path, legacy)
    tensors = load_file(legacy / "model.safetensors")
    torch.save({k: torch.from_numpy(v.copy()) for k, v in tensors.items()},
               legacy / "pytorch_model.bin")
    (legacy / "model.safetensors").unlink()
    args = (PROMPTS[:1], [CANDIDATES[0][0]], [CANDIDATES[0][1]])
    expected = PairRM.from_pretrained(path).logits(*args)
    np.testing.assert_allclose(PairRM.from_pretrained(legacy).logits(*args), expected, atol=1e-6)


def test_batches_hold_batch_size_rows_not_the_next_power_of_two(pairrm_dir):
    judge = PairRM.from_pretrained(pairrm_dir[0], batch_size=6)
    judge.prob_matrix(PROMPTS, CANDIDATES)
    assert {rows for rows, _ in judge.shapes_run} == {6}


def test_programs_are_one_per_width_bucket_and_a_repeat_does_not_recompile(pairrm_dir):
    path, _, _, _ = pairrm_dir
    judge = PairRM.from_pretrained(path, batch_size=4, length_buckets=(16, 24, 2048))
    judge.prob_matrix(PROMPTS, CANDIDATES)
    widths = {width for _, width in judge.shapes_run}
    assert widths == {16, 24}  # the tiny rows are 9–23 tokens: two buckets, one program each
    assert judge.compiled_programs() == len(judge.shapes_run) == 2
    judge.prob_matrix(PROMPTS[::-1], CANDIDATES[::-1])
    judge.logits(PROMPTS[:1], [CANDIDATES[0][0]], [CANDIDATES[0][1]])
    assert judge.compiled_programs() == 2
    with pytest.raises(ValueError, match="largest ≥ 2048"):
        PairRM.from_pretrained(path, length_buckets=(64, 512))


def test_bfloat16_judge_stays_close_to_float32(pairrm_dir):
    path, _, _, _ = pairrm_dir
    args = (PROMPTS, [c[0] for c in CANDIDATES], [c[3] for c in CANDIDATES])
    full = PairRM.from_pretrained(path, batch_size=4).logits(*args)
    half = PairRM.from_pretrained(path, batch_size=4, dtype="bfloat16")
    assert jax.tree.leaves(half.on_mesh.state)[0].dtype == jax.numpy.bfloat16
    diff = float(np.max(np.abs(half.logits(*args) - full)))
    print(f"PairRM logits: max |bf16 − fp32| = {diff:.3f} (fp32 logits up to {np.max(np.abs(full)):.2f})")
    assert diff <= 0.1 * max(1.0, float(np.max(np.abs(full)))), diff
