"""Responses as data: sampling a policy into per-prompt columns, token batches of prompt + response
rows, and log-probs of given responses under a model (teacher forcing)."""

import numpy as np

from nash_jax import data, parallel, runs
from nash_jax.parallel.padding import bucket_size, left_pad
from nash_jax.rollout.sampling import eos_ids_of, generate, pad_id_of


def sample_rows(model, tokenizer, prompt_ids, *, num_samples, sampling, key_of, mesh, desc,
                max_new_tokens=None, crash_prefix=None):
    """Sample `num_samples` responses per prompt (batches of sampling.prompts_per_batch) → dict of
    per-prompt columns: response_ids, responses (text), lengths, logp (Σ log π, untempered), finished."""
    columns = {"response_ids": [], "responses": [], "lengths": [], "logp": [], "finished": []}
    pad_id, eos_ids = pad_id_of(tokenizer), eos_ids_of(tokenizer)  # once: eos reads generation_config
    per_batch = sampling.prompts_per_batch
    bar = runs.progress(len(prompt_ids), desc, "prompt")
    for index, batch in enumerate(data.batches(prompt_ids, per_batch)):
        samples = generate(model, batch, num_samples=num_samples,
                           max_new_tokens=max_new_tokens or sampling.max_new_tokens,
                           temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                           eos_token_ids=eos_ids, key=key_of(index), mesh=mesh,
                           pad_id=pad_id, batch_buckets=[per_batch])
        for b in range(len(batch)):
            ids = [samples.tokens[b, k, :samples.lengths[b, k]].tolist() for k in range(num_samples)]
            columns["response_ids"].append(ids)
            columns["responses"].append([tokenizer.decode(r, skip_special_tokens=True) for r in ids])
            columns["lengths"].append(samples.lengths[b].tolist())
            columns["logp"].append(samples.logprobs_raw[b].sum(-1).tolist())
            columns["finished"].append(samples.finished[b].tolist())
        bar.update(len(batch))
        if crash_prefix:
            runs.crash_point(f"{crash_prefix}:batch={index + 1}")
    bar.close()
    return columns


def token_batch(prompt_ids, response_ids, pad_id, width=None):
    """Left-padded prompt + response rows → tokens, segment_ids, loss_mask [N, T]; the loss mask
    covers the response tokens. T is `width` (a planned step's length: one program for every batch of
    a run) when every row fits it, else the power of two ≥ 8 that fits the longest."""
    rows = [list(p) + list(r) for p, r in zip(prompt_ids, response_ids)]
    longest = max(len(r) for r in rows)
    if width is None or longest > width:
        width = bucket_size(longest, minimum=8, what="sequence length")
    tokens, segment_ids = left_pad(rows, width, pad_id)
    loss_mask = np.zeros_like(segment_ids, dtype=bool)
    for i, r in enumerate(response_ids):
        if len(r):
            loss_mask[i, width - len(r):] = True
    return {"tokens": tokens, "segment_ids": segment_ids, "loss_mask": loss_mask}


def pg_batch(prompt_ids, response_ids, behaviour_logprobs, advantages, pad_id, rows, width=None):
    """The policy-gradient objectives' batch (`pg`, `pg_kl`): token_batch's fields (`width` tokens, as
    token_batch), behaviour_logp [N, T] (log-prob of token t at position t, 0 on the prompt) and
    advantage [N], padded to `rows` rows with copies of the first whose loss mask, advantage and
    behaviour log-probs are zero."""
    batch = token_batch(prompt_ids, response_ids, pad_id, width)
    width = batch["tokens"].shape[1]
    behaviour = np.zeros((len(response_ids), width), np.float32)
    for i, logprobs in enumerate(behaviour_logprobs):
        if len(logprobs):  # an empty response leaves its row at 0 (a slice [width:] is empty)
            behaviour[i, width - len(logprobs):] = logprobs
    batch["behaviour_logp"] = behaviour
    batch["advantage"] = np.asarray(advantages, np.float32)
    pad = rows - len(response_ids)
    if pad < 0:
        raise ValueError(f"{len(response_ids)} policy-gradient rows do not fit a batch of {rows}")
    out = {}
    for name, value in batch.items():
        filler = np.repeat(value[:1], pad, axis=0)
        if name in ("loss_mask", "advantage", "behaviour_logp"):
            filler = np.zeros_like(filler)
        out[name] = np.concatenate([value, filler])
    return out


def sequence_kls(model, reference, prompt_ids, response_ids, tokenizer, mesh, per_call=64,
                 logprob_chunk=None, temperature=1.0):
    """[B][K] Σ_t KL(π(·|prompt, y_<t) ‖ π_0(·|prompt, y_<t)) along each of K responses per prompt:
    `model` is π, `reference` π_0, both at `temperature` (the one the responses were sampled at); the
    exact KL over the vocabulary at each response position."""
    from nash_jax.train import split_model
    from nash_jax.train.steps import DEFAULT_LOGPROB_CHUNK, make_kl

    (model_def, params), (reference_def, reference_params) = split_model(model), split_model(reference)
    chunk = DEFAULT_LOGPROB_CHUNK if logprob_chunk is None else logprob_chunk
    kl = make_kl(model_def, reference_def, mesh, logprob_chunk=chunk, temperature=temperature)
    return _per_response(lambda batch: kl.jitted((params, reference_params), kl.place_global(batch)),
                         prompt_ids, response_ids, tokenizer, mesh, per_call)


def sequence_logprobs(model, prompt_ids, response_ids, tokenizer, mesh, per_call=64,
                      logprob_chunk=None):
    """[B][K] Σ log π(response | prompt) under `model` (teacher forcing), for K responses per prompt.

    logprob_chunk: positions per chunk of logits (train/steps.py; default its DEFAULT_LOGPROB_CHUNK),
    so that a 128K vocabulary never materialises [per_call, T, V] fp32 logits."""
    from nash_jax.train import make_logprobs, split_model
    from nash_jax.train.steps import DEFAULT_LOGPROB_CHUNK

    model_def, params = split_model(model)
    chunk = DEFAULT_LOGPROB_CHUNK if logprob_chunk is None else logprob_chunk
    logprobs = make_logprobs(model_def, mesh, logprob_chunk=chunk)
    return _per_response(lambda batch: logprobs.jitted(params, logprobs.place_global(batch)),
                         prompt_ids, response_ids, tokenizer, mesh, per_call)


def _per_response(values_of, prompt_ids, response_ids, tokenizer, mesh, per_call):
    """[B][K] values_of(token batch) -> [N] for K responses per prompt, `per_call` rows at a time."""
    pad_id = pad_id_of(tokenizer)
    flat = [(p, r) for p, rs in zip(prompt_ids, response_ids) for r in rs]
    out = []
    for start in range(0, len(flat), per_call):
        chunk = flat[start:start + per_call]
        padded = parallel.pad_to_shards(chunk, mesh)
        batch = token_batch([p for p, _ in padded], [r for _, r in padded], pad_id)
        out.extend(parallel.gather_to_host(values_of(batch))[:len(chunk)].tolist())
    k = len(response_ids[0])
    return [out[b * k:(b + 1) * k] for b in range(len(prompt_ids))]
