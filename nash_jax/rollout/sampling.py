"""Generation: K samples per prompt with a KV cache, and geometric-mixture decoding of two models.

Each prompt is prefilled once; its cache is then repeated for its K samples. Decoding runs in one jitted
`lax.while_loop` that stops as soon as every row has finished. Prompt lengths and batch sizes are
padded to buckets, and temperature / top-p / top-k are traced values, so a run compiles a handful of
programs and changing a sampling setting recompiles nothing.

Log-probs come three ways for every sampled token:
  logprobs      under the distribution actually sampled from (after temperature, top-k, top-p);
  logprobs_raw  under each model untempered and untruncated (for SPPO this is the anchor log π_t(y));
  mixture       under softmax((1 − β) log π + β log μ) untempered (Nash-MD's opponent distribution).
Tokens after EOS are padding and carry log-prob 0.
"""

import json
import weakref
from pathlib import Path

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nash_jax import parallel
from nash_jax.models.llama import KVCache, positions_from_segments
from nash_jax.models.tokenizer import chat_prompt
from nash_jax.parallel.padding import bucket_size, left_pad


@flax.struct.dataclass
class Samples:
    tokens: np.ndarray  # [B, K, N] generated tokens, pad_id after EOS
    lengths: np.ndarray  # [B, K] generated tokens, EOS included
    logprobs: np.ndarray  # [B, K, N] under the sampling distribution
    logprobs_raw: np.ndarray  # [B, K, N] under the (first) model, T = 1, no truncation
    finished: np.ndarray  # [B, K] whether the sample ended with an EOS token


@flax.struct.dataclass
class MixtureSamples:
    tokens: np.ndarray  # [B, K, N]
    lengths: np.ndarray  # [B, K]
    logprobs: np.ndarray  # [B, K, N] under the sampling distribution (mixture, tempered, truncated)
    logprobs_policy: np.ndarray  # [B, K, N] log π_θ
    logprobs_reference: np.ndarray  # [B, K, N] log μ
    logprobs_mixture: np.ndarray  # [B, K, N] log of the normalised geometric mixture, T = 1
    finished: np.ndarray  # [B, K]


def sampling_distribution(logp, temperature, top_p, top_k):
    """Log-probs [R, V] of the distribution to sample from: temperature, then top-k, then top-p.

    top-k = 0 keeps every token; top-p keeps the smallest set of most likely tokens whose mass reaches
    p, the token that crosses p included (tokens tied with the last kept one are kept too). Without
    truncation (top-k 0, top-p 1) the thresholds are not computed at all.
    """
    vocab = logp.shape[-1]
    scaled = logp / jnp.where(temperature > 0, temperature, 1.0)

    def truncate(scaled):
        k = jnp.where(top_k > 0, jnp.minimum(top_k, vocab), vocab)
        kth = _largest_threshold(scaled, lambda keep: jnp.sum(keep, -1, keepdims=True) >= k)
        top = jax.nn.log_softmax(jnp.where(scaled >= kth, scaled, -jnp.inf), axis=-1)
        mass = lambda keep: jnp.sum(jnp.where(keep, jnp.exp(top), 0.0), -1, keepdims=True)  # noqa: E731
        cut = jnp.where(top_p >= 1.0, -jnp.inf,
                        _largest_threshold(top, lambda keep: mass(keep) >= top_p))
        return jnp.where(top >= cut, top, -jnp.inf)

    truncated = jax.lax.cond((top_k > 0) | (top_p < 1.0), truncate, lambda x: x, scaled)
    return jax.nn.log_softmax(truncated, axis=-1)


def _largest_threshold(values, enough, iterations=64):
    """Per row, the largest t such that enough(values >= t) holds, by bisection over the values' range.

    `enough` must hold at the smallest finite value and be monotone in t. Bisection costs a few dozen
    vectorised passes over [R, V], where a sort per decode step dominated the whole step on CPU; it
    stops resolving at adjacent floats, which is exact for thresholds that are themselves values.
    """
    finite = jnp.isfinite(values)
    lo = jnp.min(jnp.where(finite, values, jnp.inf), -1, keepdims=True)
    hi = jnp.max(jnp.where(finite, values, -jnp.inf), -1, keepdims=True)

    def halve(_, bounds):
        lo, hi = bounds
        mid = lo + (hi - lo) / 2
        ok = enough(values >= mid)
        return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid)

    lo, hi = jax.lax.fori_loop(0, iterations, halve, (lo, hi))
    return jnp.where(enough(values >= hi), hi, lo)


def sample_token(key, logp, temperature, top_p, top_k):
    """(token [R], its log-prob under the sampling distribution [R]); temperature 0 is greedy."""
    greedy = temperature <= 0
    dist = sampling_distribution(logp, temperature, top_p, top_k)
    token = jnp.where(greedy, jnp.argmax(logp, axis=-1), jax.random.categorical(key, dist, axis=-1))
    token_logp = jnp.take_along_axis(dist, token[:, None], axis=-1)[:, 0]
    return token, jnp.where(greedy, 0.0, token_logp)


def fan_out(cache, k):
    """Repeat each prompt's cache for its k continuations (samples, or the LLM judge's ordered pairs):
    row b becomes rows b·k … b·k + k − 1."""
    return KVCache(keys=jnp.repeat(cache.keys, k, axis=1), values=jnp.repeat(cache.values, k, axis=1),
                   segment_ids=jnp.repeat(cache.segment_ids, k, axis=0), end=cache.end)


def _cache_rows_sharded(cache):
    """The cache with its rows sharded like the prompts (parallel.rows_sharded): without it XLA kept
    the whole KV cache on every device (SmolLM2, 96 prompts × 4 samples on 8 devices: 3.7 GB of
    scratch a device, against 0.7 GB sharded)."""
    return cache.replace(keys=parallel.rows_sharded(cache.keys, 1),
                         values=parallel.rows_sharded(cache.values, 1),
                         segment_ids=parallel.rows_sharded(cache.segment_ids))


def _decode(graphdefs, states, tokens, segment_ids, key, temperature, top_p, top_k, beta, eos_ids,
            pad_id, *, num_samples, max_new_tokens):
    """Prefill every model once, then sample from the β-mixture of their next-token distributions.

    states: per model (params, rest). With one model β is ignored and the mixture is that model.
    Returns per-token arrays [B·K, N]. Traced on the prompts' mesh (_decode_on), its rows stay
    sharded as theirs are.
    """
    models = [nnx.merge(g, *state) for g, state in zip(graphdefs, states)]
    rows = tokens.shape[0] * num_samples
    positions = positions_from_segments(segment_ids)
    caches, next_logps = _prefill(models, tokens, positions, segment_ids, num_samples, max_new_tokens)
    position = jnp.repeat(positions[:, -1] + 1, num_samples)  # prompts are left-padded

    def mixture_logp(logps):
        return logps[0] if len(logps) == 1 else _mixture(logps, beta)

    zeros = jnp.zeros((rows, max_new_tokens), jnp.float32)
    init = dict(t=jnp.zeros((), jnp.int32), caches=tuple(caches), next_logps=tuple(next_logps),
                position=position, done=jnp.zeros(rows, bool), lengths=jnp.zeros(rows, jnp.int32),
                finished=jnp.zeros(rows, bool), tokens=jnp.full((rows, max_new_tokens), pad_id),
                logprobs=zeros, raw=tuple(zeros for _ in models), mixture=zeros)

    def cond(s):
        return (s["t"] < max_new_tokens) & ~jnp.all(s["done"])

    def body(s):
        t, done = s["t"], s["done"]
        mixed = mixture_logp(s["next_logps"])
        token, token_logp = sample_token(jax.random.fold_in(key, t), mixed, temperature, top_p, top_k)
        token = jnp.where(done, pad_id, token)
        live = ~done

        def record(buffer, values):
            return buffer.at[:, t].set(jnp.where(live, values, 0).astype(buffer.dtype))

        is_eos = jnp.any(token[:, None] == eos_ids[None, :], axis=-1) & live
        caches, next_logps = [], []
        for model, cache in zip(models, s["caches"]):
            logits, cache = model(token[:, None], s["position"][:, None],
                                  jnp.ones((rows, 1), jnp.int32), cache)
            caches.append(_cache_rows_sharded(cache))
            next_logps.append(parallel.rows_sharded(jax.nn.log_softmax(logits[:, 0])))
        return dict(
            t=t + 1, caches=tuple(caches), next_logps=tuple(next_logps), position=s["position"] + 1,
            done=done | is_eos, lengths=s["lengths"] + live.astype(jnp.int32),
            finished=s["finished"] | is_eos,
            tokens=s["tokens"].at[:, t].set(token), logprobs=record(s["logprobs"], token_logp),
            raw=tuple(record(buf, _pick(lp, token)) for buf, lp in zip(s["raw"], s["next_logps"])),
            mixture=record(s["mixture"], _pick(mixed, token)))

    final = jax.lax.while_loop(cond, body, init)
    return {name: final[name] for name in ("tokens", "lengths", "logprobs", "raw", "mixture",
                                           "finished")}


def _prefill(models, tokens, positions, segment_ids, num_samples, max_new_tokens):
    """Each model's KV cache after the prompts and its next-token log-probs, fanned out to the K
    samples of each prompt: (caches, next_logps), rows sharded."""
    batch, prompt_len = tokens.shape
    caches, next_logps = [], []
    for model in models:
        cache = KVCache.create(model.config, batch, prompt_len + max_new_tokens)
        logits, cache = model(tokens, positions, segment_ids, _cache_rows_sharded(cache))
        caches.append(_cache_rows_sharded(fan_out(cache, num_samples)))
        next_logp = jnp.repeat(jax.nn.log_softmax(logits[:, -1]), num_samples, axis=0)
        next_logps.append(parallel.rows_sharded(next_logp))
    return caches, next_logps


def _mixture(logps, beta):
    """log softmax((1 − β) log π + β log μ): the geometric mixture of two next-token distributions."""
    return jax.nn.log_softmax((1.0 - beta) * logps[0] + beta * logps[1], axis=-1)


def _pick(logp, token):
    """logp[i, token[i]] for every row i."""
    return jnp.take_along_axis(logp, token[:, None], axis=-1)[:, 0]


def _decode_on(graphdefs, states, tokens, segment_ids, key, temperature, top_p, top_k, beta, eos_ids,
               pad_id, *, num_samples, max_new_tokens, mesh):
    """_decode traced on `mesh` (parallel.traced_on)."""
    return parallel.traced_on(mesh, _decode)(graphdefs, states, tokens, segment_ids, key, temperature,
                                             top_p, top_k, beta, eos_ids, pad_id, num_samples=num_samples,
                                             max_new_tokens=max_new_tokens)


_decode_jit = jax.jit(_decode_on, static_argnames=("graphdefs", "num_samples", "max_new_tokens", "mesh"))


def _prepare(prompts, vocab_size, mesh, prompt_buckets, batch_buckets, pad_id):
    """Check ragged prompts and pad them into a bucketed [B', P] batch placed on the mesh."""
    if not prompts:
        raise ValueError("no prompts given")
    for i, prompt in enumerate(prompts):
        ids = np.asarray(prompt)
        if ids.ndim != 1 or ids.size == 0:
            raise ValueError(f"prompt {i} must be a non-empty list of token ids; got {prompt!r}")
        bad = ids[(ids < 0) | (ids >= vocab_size)]
        if bad.size:
            raise ValueError(f"prompt {i} has token id {int(bad[0])} outside the vocabulary "
                             f"[0, {vocab_size})")
    width = bucket_size(max(len(p) for p in prompts), prompt_buckets, minimum=8, what="prompt length")
    rows = parallel.pad_to_shards([list(map(int, p)) for p in prompts], mesh, fill=[pad_id],
                                  bucket=True, buckets=batch_buckets)
    tokens, segment_ids = left_pad(rows, width, pad_id)
    sharding = parallel.batch_sharding(mesh, 2)
    return (parallel.place_global_array(tokens, sharding),
            parallel.place_global_array(segment_ids, sharding))


# Per module: (graphdef, non-parameter state), split once. Online recipes sample every step with new
# parameters (`params=`): they then reach the compiled decoder without re-splitting the module.
_SPLITS = weakref.WeakKeyDictionary()


def _split(model, params):
    """(graphdef, (params, *others)) of `model`, with `params` (a TrainState's: an nnx.State of its
    Params, or of its LoRA adapters only, the module's frozen base then among `others`) in place of
    the module's own when given."""
    if params is None:
        graphdef, own, rest = nnx.split(model, nnx.Param, ...)
        if model not in _SPLITS and not nnx.state(model, nnx.LoRAParam):
            _SPLITS[model] = (graphdef, (rest,))
        return graphdef, (own, rest)
    if model not in _SPLITS:
        if nnx.state(model, nnx.LoRAParam):
            graphdef, _, frozen, rest = nnx.split(model, nnx.LoRAParam, nnx.Param, ...)
            _SPLITS[model] = (graphdef, (frozen, rest))
        else:
            graphdef, _, rest = nnx.split(model, nnx.Param, ...)
            _SPLITS[model] = (graphdef, (rest,))
    graphdef, others = _SPLITS[model]
    return graphdef, (params, *others)


def _run(models, prompts, *, num_samples, max_new_tokens, temperature, top_p, top_k, beta,
         eos_token_ids, key, mesh, pad_id, prompt_buckets, batch_buckets, params=(None, None)):
    if num_samples < 1 or max_new_tokens < 1:
        raise ValueError(f"need num_samples ≥ 1 and max_new_tokens ≥ 1; got {num_samples}, "
                         f"{max_new_tokens}")
    if not 0.0 < top_p <= 1.0 or top_k < 0 or temperature < 0:
        raise ValueError(f"need temperature ≥ 0, 0 < top_p ≤ 1, top_k ≥ 0; got {temperature}, "
                         f"{top_p}, {top_k}")
    mesh = mesh or parallel.make_mesh(devices=jax.devices()[:1])
    tokens, segment_ids = _prepare(prompts, models[0].config.vocab_size, mesh, prompt_buckets,
                                   batch_buckets, pad_id)
    graphdefs, states = zip(*(_split(m, p) for m, p in zip(models, params)))
    eos = jnp.asarray(list(eos_token_ids) or [-1], jnp.int32)
    out = _decode_jit(tuple(graphdefs), tuple(states), tokens, segment_ids, key,
                      jnp.float32(temperature), jnp.float32(top_p), jnp.int32(top_k), jnp.float32(beta),
                      eos, jnp.int32(pad_id), num_samples=num_samples, max_new_tokens=max_new_tokens,
                      mesh=mesh)
    b = len(prompts)

    def host(x):
        x = parallel.gather_to_host(x)
        return x.reshape(-1, num_samples, *x.shape[1:])[:b]

    return {name: tuple(host(v) for v in value) if isinstance(value, tuple) else host(value)
            for name, value in out.items()}


def generate(model, prompts, *, num_samples, max_new_tokens, temperature=1.0, top_p=1.0, top_k=0,
             eos_token_ids=(), key, mesh=None, pad_id=0, prompt_buckets=None, batch_buckets=None,
             params=None):
    """K = num_samples samples for each prompt (a list of token-id lists, any lengths) → Samples.

    params: the model's parameters as an nnx.State (e.g. a TrainState's `params`) to sample with
    instead of the module's own; the module is then split once and reused, and new parameters of the
    same shapes and shardings recompile nothing.

    In a multi-process run every process passes the same prompts and key; each places its share of the
    batch, and every process gets all the samples back.

    temperature 0 is greedy. Prompt lengths are padded to powers of two (≥ 8) or to the smallest of
    `prompt_buckets`; the batch likewise (and to a multiple of the mesh's data × fsdp devices).
    """
    out = _run([model], prompts, num_samples=num_samples, max_new_tokens=max_new_tokens,
               temperature=temperature, top_p=top_p, top_k=top_k, beta=0.0,
               eos_token_ids=eos_token_ids, key=key, mesh=mesh, pad_id=pad_id,
               prompt_buckets=prompt_buckets, batch_buckets=batch_buckets, params=(params,))
    return Samples(tokens=out["tokens"], lengths=out["lengths"], logprobs=out["logprobs"],
                   logprobs_raw=out["raw"][0], finished=out["finished"])


def mixture_generate(policy, reference, beta, prompts, *, num_samples=1, max_new_tokens,
                     temperature=1.0, top_p=1.0, top_k=0, eos_token_ids=(), key, mesh=None, pad_id=0,
                     prompt_buckets=None, batch_buckets=None, policy_params=None,
                     reference_params=None):
    """Sample from the token-wise geometric mixture softmax((1 − β) log π + β log μ) → MixtureSamples.

    β weights the reference μ (NLHF's and TRL's convention): β = 0 is the policy, β = 1 the reference.
    Both models are prefilled once and decoded in lock-step, each with its own KV cache.
    policy_params / reference_params: as `params` of `generate`.
    """
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"mixture weight beta={beta!r}; expected [0, 1]")
    if policy.config.vocab_size != reference.config.vocab_size:
        raise ValueError(f"policy and reference must share a tokenizer; their vocabularies differ "
                         f"({policy.config.vocab_size} vs {reference.config.vocab_size} tokens)")
    out = _run([policy, reference], prompts, num_samples=num_samples, max_new_tokens=max_new_tokens,
               temperature=temperature, top_p=top_p, top_k=top_k, beta=beta,
               eos_token_ids=eos_token_ids, key=key, mesh=mesh, pad_id=pad_id,
               prompt_buckets=prompt_buckets, batch_buckets=batch_buckets,
               params=(policy_params, reference_params))
    return MixtureSamples(tokens=out["tokens"], lengths=out["lengths"], logprobs=out["logprobs"],
                          logprobs_policy=out["raw"][0], logprobs_reference=out["raw"][1],
                          logprobs_mixture=out["mixture"], finished=out["finished"])


def eos_ids_of(tokenizer):
    """The ids that end a response, as a sorted list (empty when none is declared): the tokenizer's EOS
    and the eos_token_id of generation_config.json beside it. An instruct model often ends its turn
    with a token other than the tokenizer's EOS (Gemma's <end_of_turn>, Llama 3's <|eot_id|>,
    Qwen's <|im_end|>); transformers' generate and vLLM stop on generation_config's."""
    ids = _as_ids(tokenizer.eos_token_id)
    config = Path(getattr(tokenizer, "name_or_path", "") or "_") / "generation_config.json"
    if config.is_file():
        ids += _as_ids(json.loads(config.read_text()).get("eos_token_id"))
    return sorted(set(ids))


def _as_ids(ids):
    return [] if ids is None else [ids] if isinstance(ids, int) else list(ids)


def pad_id_of(tokenizer):
    """The tokenizer's padding id (0 when it declares none: padding is masked by segment ids anyway)."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0


def generate_text(model, tokenizer, prompts, *, num_samples, max_new_tokens, key, system=None,
                  **sampling):
    """Prompt strings → (responses [B][K] strings, Samples): chat template, generate, decode."""
    texts = [chat_prompt(tokenizer, p, system=system) for p in prompts]
    templated = bool(getattr(tokenizer, "chat_template", None))
    # A chat template writes its own BOS; a raw prompt gets the tokenizer's special tokens.
    ids = [tokenizer(t, add_special_tokens=not templated)["input_ids"] for t in texts]
    pad_id = pad_id_of(tokenizer)
    sampling.setdefault("eos_token_ids", eos_ids_of(tokenizer))
    samples = generate(model, ids, num_samples=num_samples, max_new_tokens=max_new_tokens, key=key,
                       pad_id=pad_id, **sampling)
    responses = [[tokenizer.decode(samples.tokens[b, k, :samples.lengths[b, k]],
                                   skip_special_tokens=True)
                  for k in range(num_samples)] for b in range(len(prompts))]
    return responses, samples
