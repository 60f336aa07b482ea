"""Prompt data: local files through `datasets`, disjoint seeded splits, templating, grain batches."""

import hashlib
import json

import datasets
import pytest

from nash_jax import data
from nash_jax.models.tokenizer import load_tokenizer
from nash_jax.tasks.synthetic import synthetic

PROMPTS = [f"write a short reply about {t}" for t in synthetic.TOPICS]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(synthetic.TOKENIZER_DIR)


def test_every_local_format_reads_the_same_prompts(tmp_path):
    ds = datasets.Dataset.from_dict({"prompt": PROMPTS, "other": list(range(len(PROMPTS)))})
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    ds.to_parquet(str(tmp_path / "p.parquet"))
    ds.save_to_disk(str(tmp_path / "saved"))
    datasets.DatasetDict({"train": ds}).save_to_disk(str(tmp_path / "saved_dict"))
    (tmp_path / "dir").mkdir()
    ds.select(range(8)).to_parquet(str(tmp_path / "dir" / "a.parquet"))
    ds.select(range(8, len(PROMPTS))).to_parquet(str(tmp_path / "dir" / "b.parquet"))
    arrow_dir = tmp_path / "saved"
    arrow_file = next(arrow_dir.glob("*.arrow"))
    for path in ("p.jsonl", "p.parquet", "saved", "saved_dict", "dir", arrow_file):
        assert data.load_prompt_texts(tmp_path / path) == PROMPTS, path


def test_bad_datasets_say_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match="prompt dataset .*missing.jsonl does not exist"):
        data.load_prompt_texts(tmp_path / "missing.jsonl")
    (tmp_path / "p.jsonl").write_text(json.dumps({"instruction": "hi"}) + "\n")
    with pytest.raises(ValueError, match=r"columns \['instruction'\]; data.prompt_column='prompt'"):
        data.load_prompt_texts(tmp_path / "p.jsonl")
    (tmp_path / "e.jsonl").write_text(json.dumps({"prompt": " "}) + "\n")
    with pytest.raises(ValueError, match="row 0 has prompt=' '; expected a non-empty string"):
        data.load_prompt_texts(tmp_path / "e.jsonl")


def test_splits_are_disjoint_fixed_by_the_seed_and_hold_out_evaluation():
    texts = [f"p{i}" for i in range(20)]
    a = data.split_prompts(texts, iterations=3, eval_prompts=4, seed=1)
    b = data.split_prompts(texts, iterations=3, eval_prompts=4, seed=1)
    assert a == b and len(a.eval) == 4 and [len(s) for s in a.iterations] == [5, 5, 5]
    seen = a.eval + sum(a.iterations, [])
    assert len(set(seen)) == len(seen)
    assert data.split_prompts(texts, iterations=3, eval_prompts=4, seed=2) != a


def test_repeated_prompts_are_dropped_before_the_split_so_no_held_out_prompt_is_trained_on():
    texts = ["same prompt"] * 40 + [f"p{i}" for i in range(12)]
    splits = data.split_prompts(texts, iterations=2, eval_prompts=3, seed=0)
    held_out, trained = set(splits.eval), set(sum(splits.iterations, []))
    assert splits.duplicates_dropped == 39 and not held_out & trained
    assert len(splits.eval) + sum(map(len, splits.iterations)) == 13
    kept = data.split_prompts(texts, iterations=2, eval_prompts=3, seed=0, drop_duplicates=False)
    assert kept.duplicates_dropped == 0 and sum(map(len, kept.iterations)) == 48
    with pytest.raises(ValueError, match=r"13 prompts \(39 duplicates dropped\): after 3 held out"):
        data.split_prompts(texts, iterations=2, eval_prompts=3, per_iteration=6, seed=0)


def test_a_run_that_split_before_repeats_were_dropped_resumes_with_its_split(tmp_path):
    from nash_jax.config import DataConfig
    from nash_jax.engine import prompt_sets
    from nash_jax.runs import RunDir

    texts = ["same prompt"] * 10 + [f"p{i}" for i in range(20)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"prompt": t}) + "\n" for t in texts))
    prompts = DataConfig(path=str(tmp_path / "p.jsonl"))
    fresh = prompt_sets.prompt_splits(prompts, RunDir(tmp_path / "new"), eval_prompts=4, seed=0)
    assert fresh.duplicates_dropped == 9
    old = RunDir(tmp_path / "old")  # its manifest recorded the prompts without a count
    old.manifest["inputs"] = {"prompts": {"digest": hashlib.sha256(json.dumps(texts).encode()).hexdigest(),
                                          "source": "data.path=p.jsonl"}}
    resumed = prompt_sets.prompt_splits(prompts, old, eval_prompts=4, seed=0)
    assert resumed == data.split_prompts(texts, iterations=1, eval_prompts=4, seed=0, drop_duplicates=False)


def test_an_empty_split_is_refused():
    with pytest.raises(ValueError, match="3 prompts: after 2 held out .* too few for 2 splits"):
        data.split_prompts(["a", "b", "c"], iterations=2, eval_prompts=2)


def test_too_long_prompts_follow_the_documented_policy(tokenizer):
    texts = ["write a short reply about rivers", " ".join(["so"] * 40)]
    ids, kept, skipped = data.encode_prompts(tokenizer, texts, max_tokens=16, too_long="skip")
    assert kept == [0] and skipped == 1
    assert tokenizer.convert_ids_to_tokens(ids[0])[:3] == ["<s>", "<|user|>", "write"]  # BOS once
    ids, kept, _ = data.encode_prompts(tokenizer, texts, max_tokens=16, too_long="truncate_left")
    assert kept == [0, 1] and len(ids[1]) == 16
    assert ids[1][-1] == tokenizer.convert_tokens_to_ids("<|assistant|>")  # the generation prompt kept
    with pytest.raises(ValueError, match="prompt 1 has 43 tokens after the chat template; "
                                         "data.max_prompt_tokens=16"):
        data.encode_prompts(tokenizer, texts, max_tokens=16, too_long="error")
    with pytest.raises(ValueError, match="no prompt left"):
        data.encode_prompts(tokenizer, texts[1:], max_tokens=16, too_long="skip")


def test_grain_batches_resume_exactly_from_a_saved_state():
    items = list(range(23))
    it = iter(data.batches(items, 4, seed=3, epochs=2, drop_remainder=True))
    first = [next(it) for _ in range(3)]
    state = it.get_state()
    rest = list(it)
    resumed = iter(data.batches(items, 4, seed=3, epochs=2, drop_remainder=True))
    resumed.set_state(json.loads(json.dumps(state)))
    assert list(resumed) == rest
    assert len(first) + len(rest) == data.num_batches(23, 4, epochs=2, drop_remainder=True) == 11
    assert sorted(sum(first + rest, []))[:8] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_reading_prompts_draws_no_progress_bar_and_leaves_the_setting_as_it_was(tmp_path, capfd):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(f'{{"prompt": "p{i}"}}\n' for i in range(3)))
    assert datasets.is_progress_bar_enabled()
    assert data.load_prompt_texts(path) == ["p0", "p1", "p2"]
    captured = capfd.readouterr()
    assert "Generating" not in captured.err + captured.out, captured.err
    assert datasets.is_progress_bar_enabled()
