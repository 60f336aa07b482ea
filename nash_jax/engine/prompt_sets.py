"""A run's prompts: the held-out and training splits of the `data` section's set, and their token ids."""

import hashlib
import json
import sys

from nash_jax import data, parallel, runs, tasks


def prompt_splits(prompts, run, *, eval_prompts, seed, blocks=1):
    """The held-out prompts (`eval_prompts` of them: eval.prompts) and `blocks` disjoint training
    blocks of the `prompts` section's set (data.split_prompts). A built-in prompt set
    (tasks.BUILTIN_PROMPTS) is written to RUN_DIR/data/prompts.jsonl first, and read back through
    `datasets` like any other."""
    path, builtin = prompts.path, tasks.builtin_prompt_set(prompts.path) is not None
    if builtin:
        path = run / "data" / "prompts.jsonl"
        if not path.is_file():
            texts = tasks.builtin_prompt_texts(prompts.path, seed)
            runs.write_text_atomically(path, "".join(json.dumps({"prompt": p}) + "\n"
                                                            for p in texts))
        parallel.barrier("built-in prompts")
    texts = data.load_prompt_texts(path, prompts.prompt_column, prompts.split)
    # a built-in set repeats its task's few prompts by design (the synthetic judge reads only the
    # response); a user's set is made distinct, so that held-out prompts are never trained on. A run
    # that split its prompts before repeats were dropped (its manifest has no count) keeps its split.
    recorded = run.manifest.get("inputs", {}).get("prompts")
    split_as_before = recorded is not None and "duplicates_dropped" not in recorded
    splits = data.split_prompts(texts, iterations=blocks, eval_prompts=eval_prompts,
                                per_iteration=prompts.prompts_per_iteration, shuffle=prompts.shuffle,
                                seed=seed, drop_duplicates=not builtin and not split_as_before)
    digest = hashlib.sha256(json.dumps(texts).encode()).hexdigest()
    run.check_fingerprint("prompts", digest, source=f"data.path={path}",
                          duplicates_dropped=splits.duplicates_dropped)
    if splits.duplicates_dropped and parallel.is_writer():
        print(f"data.path={path}: {splits.duplicates_dropped} repeated prompt(s) dropped before the "
              f"split ({len(texts) - splits.duplicates_dropped} distinct)", file=sys.stderr)
    return splits


def check_prompt_lengths(prompts, tokenizer, splits):
    """Encode every prompt of `splits` as its stage will: a prompt that data.too_long=error refuses,
    or a split that data.too_long=skip empties, stops the run here, before the warm start and the
    first iteration, not when its split is reached hours later."""
    blocks = splits.iterations
    for t, block in enumerate(blocks):
        encode_prompts(prompts, tokenizer, block,
                       "training prompts" if len(blocks) == 1 else f"iteration {t}'s prompt split")
    encode_prompts(prompts, tokenizer, splits.eval, "evaluation prompts")


def encode_prompts(prompts, tokenizer, texts, where, too_long=None):
    """data.encode_prompts with the chat template's system prompt, length limit and (unless given)
    policy of the `prompts` section (data)."""
    return data.encode_prompts(tokenizer, texts, max_tokens=prompts.max_prompt_tokens,
                               too_long=too_long or prompts.too_long,
                               system=prompts.system_prompt, where=where)
