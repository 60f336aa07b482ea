"""Prompt datasets: local files through `datasets`, split per iteration, templated, batched by grain.

Splits are fixed by the seed alone: the prompts are shuffled once, the first `eval_prompts` are held out
for evaluation and never trained on, and iteration t takes the t-th disjoint block of the rest.

Prompts longer than `max_prompt_tokens` after the chat template are handled by `too_long`:
  skip           dropped from the split (the count is recorded in the manifest);
  truncate_left  the oldest tokens are cut, keeping the end of the template (the generation prompt);
  error          the run stops, naming the prompt.
"""

from dataclasses import dataclass
from pathlib import Path

import grain
import numpy as np

from nash_jax.runs.files import reading_text
from nash_jax.models.tokenizer import chat_prompt

FILE_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".arrow": "arrow",
                ".csv": "csv"}


def load_prompt_texts(path, column="prompt", split="train"):
    """Every prompt string of a local dataset: a jsonl/json/parquet/arrow/csv file, a directory of
    such files, or a `save_to_disk` directory (a Dataset, or a DatasetDict's `split`)."""
    import datasets

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"prompt dataset {path} does not exist")
    if path.is_dir() and ((path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file()):
        ds = _read(path, lambda: datasets.load_from_disk(str(path)))
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise ValueError(f"{path} has splits {sorted(ds)}; data.split={split!r} is not one")
            ds = ds[split]
    else:
        files = [path] if path.is_file() else sorted(
            p for p in path.iterdir() if p.suffix in FILE_FORMATS)
        formats = {FILE_FORMATS.get(p.suffix) for p in files}
        if not files or None in formats or len(formats) != 1:
            raise ValueError(f"{path}: expected a {'/'.join(FILE_FORMATS)} file, a directory of one "
                             "kind of them, or a save_to_disk directory")
        empty = [p for p in files if p.stat().st_size == 0]
        if empty:
            raise ValueError(f"{empty[0]} is empty; expected prompts")
        ds = _read(path, lambda: datasets.load_dataset(
            formats.pop(), data_files=[str(p) for p in files], split="train"))
    if len(ds) == 0:
        raise ValueError(f"{path} holds no rows; expected prompts in column {column!r}")
    if column not in ds.column_names:
        raise ValueError(f"{path} has columns {ds.column_names}; data.prompt_column={column!r} "
                         "is not one")
    with reading_text(path):  # arrow decodes the strings only here
        texts = list(ds[column])
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{path}: row {i} has {column}={text!r}; expected a non-empty string")
    return texts


def quietly(load):
    """load() with datasets' progress bars and log lines off: reading a local file is no download to
    watch, a bad file is said once (by _read), and the command's output is the run's own."""
    import datasets

    was_enabled, verbosity = datasets.is_progress_bar_enabled(), datasets.logging.get_verbosity()
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    try:
        return load()
    finally:
        datasets.logging.set_verbosity(verbosity)
        if was_enabled:
            datasets.enable_progress_bars()


def _read(path, load):
    """load(), with whatever datasets or pyarrow raise for a bad file said as one ValueError."""
    try:
        return quietly(load)
    except Exception as err:  # noqa: BLE001  (many kinds, from several libraries)
        cause = err.__cause__ or err
        if "corresponds to no data" in str(cause):
            raise ValueError(f"{path} holds no rows; expected prompts") from None
        raise ValueError(f"{path}: cannot be read as prompts ({type(cause).__name__}: "
                         f"{str(cause)[:300]})") from None


@dataclass(frozen=True)
class PromptSplits:
    eval: list  # held-out prompt strings
    iterations: list  # one list of prompt strings per iteration
    duplicates_dropped: int = 0  # repeated texts dropped before the split


def split_prompts(texts, *, iterations, eval_prompts, per_iteration=None, shuffle=True, seed=0,
                  drop_duplicates=True):
    """Held-out evaluation prompts and `iterations` disjoint training splits, fixed by the seed. With
    `drop_duplicates`, each text is kept once (its first row) before the split, so that no held-out
    prompt is also a training prompt: real prompt sets carry repeats."""
    distinct = list(dict.fromkeys(texts)) if drop_duplicates else list(texts)
    dropped, texts = len(texts) - len(distinct), distinct
    order = np.random.default_rng(seed).permutation(len(texts)) if shuffle else np.arange(len(texts))
    texts = [texts[i] for i in order]
    held_out, rest = texts[:eval_prompts], texts[eval_prompts:]
    per_iteration = per_iteration or len(rest) // iterations
    if per_iteration == 0 or per_iteration * iterations > len(rest):
        raise ValueError(f"{len(texts)} prompts{f' ({dropped} duplicates dropped)' if dropped else ''}: "
                         f"after {eval_prompts} held out for evaluation, "
                         f"{len(rest)} are left, too few for {iterations} splits of "
                         f"{per_iteration or 'at least 1'}; expected at least "
                         f"{eval_prompts + iterations * max(per_iteration, 1)} prompts")
    return PromptSplits(eval=held_out, iterations=[
        rest[t * per_iteration:(t + 1) * per_iteration] for t in range(iterations)],
        duplicates_dropped=dropped)


def encode_prompts(tokenizer, texts, *, max_tokens, too_long="skip", system=None, where="prompts"):
    """(token-id lists, the indices of `texts` they come from, number skipped), chat template applied.

    A chat template writes its own BOS; a raw prompt gets the tokenizer's special tokens."""
    templated = bool(getattr(tokenizer, "chat_template", None))
    ids, kept, skipped = [], [], 0
    for i, text in enumerate(texts):
        row = tokenizer(chat_prompt(tokenizer, text, system=system),
                        add_special_tokens=not templated)["input_ids"]
        if len(row) > max_tokens:
            if too_long == "error":
                raise ValueError(f"{where}: prompt {i} has {len(row)} tokens after the chat "
                                 f"template; data.max_prompt_tokens={max_tokens} (set "
                                 "data.too_long=skip or truncate_left to continue)")
            if too_long == "skip":
                skipped += 1
                continue
            row = row[-max_tokens:]
        ids.append(row)
        kept.append(i)
    if not ids:
        raise ValueError(f"{where}: no prompt left after dropping {skipped} longer than "
                         f"data.max_prompt_tokens={max_tokens}")
    return ids, kept, skipped


def batches(items, batch_size, *, seed=None, epochs=1, drop_remainder=False):
    """A grain dataset of lists of `items` (shuffled by `seed` each epoch when given). Iterate with
    `iter(...)`; the iterator's get_state()/set_state() resume it exactly.

    Every process of a multi-process run reads the same batches (they are prompts and token ids, small
    on the host) and places only its own shards on its devices (parallel.place_global_array)."""
    ds = grain.MapDataset.source(list(items))
    if seed is not None:
        ds = ds.shuffle(seed=seed)
    if epochs > 1:
        ds = ds.repeat(epochs)
    return ds.batch(batch_size, drop_remainder=drop_remainder, batch_fn=list).to_iter_dataset()


def num_batches(num_items, batch_size, *, epochs=1, drop_remainder=False):
    total = num_items * epochs
    return total // batch_size if drop_remainder else -(-total // batch_size)
