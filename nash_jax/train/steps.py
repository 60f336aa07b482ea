"""One factory of jit-compiled update steps over the table of objectives (train/objectives.py).

A step is `step(state, batch) -> (state, metrics)`: pure, compiled once with its shardings stated, the
state donated. Batches are dicts of arrays whose first axis is the example; token arrays hold prompt and
response together, `segment_ids` marks real tokens (0 = padding), and `loss_mask` marks the response
tokens whose log-probs count. Token t is predicted from tokens < t, so position 0 never counts.

Gradients are accumulated over `micro_batches` inside the step with `lax.scan`; micro-batch j takes the
examples j, j + M, j + 2M, ... so that every micro-batch stays spread over all data-parallel devices. A
step whose loss, gradient or updated parameters are not finite leaves parameters and optimiser state
untouched and reports `skipped = 1`; so does a step whose finite gradient is exactly zero (nothing to
learn from: every advantage of a pg batch 0), reporting `zero_gradient = 1`, so that Adam's momentum
and weight decay do not move a policy on steps that carry no signal. Either way the state's step count
and with it the learning-rate schedule move on: the schedule runs over the steps a run takes, so that
its warm-up and decay end with the run however many steps carried no signal.

Steps are cached: asking again for the same objective, hyperparameters, model architecture, optimiser
(the same object: `make_optimizer` returns one per configuration), shardings and micro-batching returns
the step already compiled, so that an iterative recipe compiles its step once, not once per iteration.
"""

import copy
import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec

from nash_jax import parallel
from nash_jax.core import divergence, losses
from nash_jax.train import objectives
from nash_jax.train.objectives import TOKEN_FIELDS
from nash_jax.train.optim import descent
from nash_jax.train.state import TrainState

LOGPROB_SHAPES = {f: ("N", "T") for f in TOKEN_FIELDS}

# Token positions whose [chunk, V] fp32 logits are live at once in a step (0: all of them, the full
# [N, T, V] logits). 1024 positions of a 128K vocabulary are 512 MiB; batches that small take the
# full path anyway (core/losses.chunked_token_logprobs), so tiny models pay nothing for it.
DEFAULT_LOGPROB_CHUNK = 1024


def token_logprobs(model_def, params, tokens, segment_ids, loss_mask,
                   logprob_chunk=DEFAULT_LOGPROB_CHUNK, temperature=1.0):
    """Per-token log π(tokens_{t+1} | tokens_≤t) and their mask, both [..., T − 1] (float32, bool);
    at a temperature ≠ 1, of the tempered distribution softmax(logits / temperature).

    Leading axes beyond the example's ([N, 2, T] pairs) are flattened into one forward pass. With
    logprob_chunk > 0 the log-probs come from the hidden states chunk by chunk, never from the whole
    [N, T − 1, V] logits (the same values and gradients)."""
    lead, t = tokens.shape[:-1], tokens.shape[-1]
    tokens, segment_ids, loss_mask = (x.reshape(-1, t) for x in (tokens, segment_ids, loss_mask))
    model = model_def.merge(params)
    mask = loss_mask[:, 1:]
    if logprob_chunk:
        hidden, _ = model.hidden_states(tokens[:, :-1], segment_ids=segment_ids[:, :-1])
        logp = losses.chunked_token_logprobs(hidden, model.unembedding(), tokens[:, 1:], mask,
                                             chunk=logprob_chunk,
                                             softcap=model.config.final_logit_softcap,
                                             temperature=temperature)
    else:
        logits, _ = model(tokens[:, :-1], segment_ids=segment_ids[:, :-1])
        logp = losses.token_logprobs(losses.tempered(logits, temperature), tokens[:, 1:], mask)
    return logp.reshape(*lead, t - 1), mask.reshape(*lead, t - 1).astype(bool)


def policy_logprobs(model_def, params, tokens, segment_ids, loss_mask,
                    logprob_chunk=DEFAULT_LOGPROB_CHUNK):
    """Σ_t log π(tokens_t | tokens_<t) over loss-mask positions → [N] float32."""
    logp, _ = token_logprobs(model_def, params, tokens, segment_ids, loss_mask, logprob_chunk)
    return objectives.sequence_sums(logp)


def objective_loss(objective, hyperparameters, model_def, params, batch,
                   logprob_chunk=DEFAULT_LOGPROB_CHUNK, temperature=1.0):
    """(loss, per-example metrics) of `objective` on `batch` under `params` (at `temperature` for an
    objective that compares with the sampler's log-probs, Objective.tempered)."""
    token_logp, mask = token_logprobs(model_def, params, *(batch[f] for f in TOKEN_FIELDS),
                                      logprob_chunk=logprob_chunk,
                                      temperature=temperature if objective.tempered else 1.0)
    aligned = {f: batch[f][..., 1:] if "T" in objective.fields.get(f, ()) else batch[f] for f in batch}
    return objective.loss(token_logp, mask, aligned, **hyperparameters)


def _micro_split(batch, micro_batches):
    """[N, ...] -> [M, N/M, ...] with micro-batch j = examples j, j + M, ..."""
    def split(x):
        return x.reshape(x.shape[0] // micro_batches, micro_batches, *x.shape[1:]).swapaxes(0, 1)
    return jax.tree.map(split, batch)


def _micro_join(per_example):
    """Inverse of _micro_split for per-example outputs ([M] per-micro-batch scalars stay as they are:
    their mean is the batch's, the micro-batches being equal in size)."""
    def join(x):
        if x.ndim == 1:
            return x
        return x.swapaxes(0, 1).reshape(x.shape[0] * x.shape[1], *x.shape[2:])
    return jax.tree.map(join, per_example)


def loss_and_grads(loss_fn, params, batch, micro_batches=1):
    """(mean loss, per-example outputs, mean gradient) of loss_fn(params, batch) -> (loss, outputs),
    accumulated over micro-batches with lax.scan.

    The result is the mean of the micro-batches' losses (and gradients): the full-batch loss for an
    objective that averages over examples (micro-batches are equal in size), the mean of per-micro-
    batch token means for one that divides by a token count (sft, pg with token-mean).
    """
    value_and_grad = jax.value_and_grad(loss_fn, has_aux=True)
    if micro_batches == 1:
        (loss, per_example), grads = value_and_grad(params, batch)
        return loss, per_example, grads

    def accumulate(carry, micro):
        loss_sum, grad_sum = carry
        (loss, per_example), grads = value_and_grad(params, micro)
        grad_sum = jax.tree.map(lambda a, g: a + g.astype(a.dtype), grad_sum, grads)
        return (loss_sum + loss, grad_sum), per_example

    zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
    (loss_sum, grad_sum), per_example = jax.lax.scan(
        accumulate, (jnp.zeros((), jnp.float32), zeros), _micro_split(batch, micro_batches))
    grads = jax.tree.map(lambda g, p: (g / micro_batches).astype(p.dtype), grad_sum, params)
    return loss_sum / micro_batches, _micro_join(per_example), grads


def _update(loss_fn, optimizer, schedule, micro_batches, state, batch):
    loss, per_example, grads = loss_and_grads(loss_fn, state.params, batch, micro_batches)
    grad_norm = optax.tree.norm(grads)
    direction, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, descent(direction, schedule(state.step)))
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm) & jnp.isfinite(optax.tree.norm(params))
    # A gradient of exactly zero (a pg batch whose every advantage is 0) carries no information, yet
    # Adam would still move the parameters a full step along its momentum, and weight decay with it.
    has_gradient = grad_norm > 0
    applied = finite & has_gradient

    def new_if_applied(new, old):
        return jax.tree.map(lambda a, b: jnp.where(applied, a, b), new, old)

    new_state = TrainState(params=new_if_applied(params, state.params),
                           opt_state=new_if_applied(opt_state, state.opt_state),
                           step=state.step + 1, key=state.key)
    metrics = {
        "loss": loss,
        "grad_norm": grad_norm,
        "learning_rate": schedule(state.step),
        "tokens": jnp.sum(batch["loss_mask"][..., 1:]).astype(jnp.float32),
        "skipped": 1.0 - finite.astype(jnp.float32),
        "zero_gradient": (finite & ~has_gradient).astype(jnp.float32),
        **{name: jnp.mean(values) for name, values in per_example.items() if name != "log_ratio"},
    }
    if "log_ratio" in per_example:
        log_ratio = per_example["log_ratio"]
        metrics.update(log_ratio_mean=jnp.mean(log_ratio), log_ratio_min=jnp.min(log_ratio),
                       log_ratio_max=jnp.max(log_ratio))
    return new_state, metrics


class Step:
    """A jitted pure step plus the checks and placement of its batches (at the edge, not inside jit).

    Call as `state, metrics = step(state, batch)`; `step.jitted(state, batch)` is the bare compiled
    function. With `frozen_argument`, `fn` is `fn(state, batch, frozen)` and `step.jitted` binds
    `step.frozen` (a LoRA model's frozen base, an argument never donated, so that anchors sharing the
    base stay valid; None without one) as its last argument.
    """

    def __init__(self, name, shapes, fn, mesh, micro_batches, state_shardings=None, extra_keys=False,
                 frozen_argument=False):
        self.name, self.shapes, self.mesh, self.micro_batches = name, shapes, mesh, micro_batches
        self.extra_keys = extra_keys  # ignore keys beyond `shapes` instead of refusing them
        self.batch_shardings = {f: parallel.batch_sharding(mesh, len(shape))
                                for f, shape in shapes.items()}
        self.frozen = None
        replicated = NamedSharding(mesh, PartitionSpec())
        fn = parallel.traced_on(mesh, fn)  # activations keep their rows sharded (parallel.rows_sharded)
        frozen = (None,) if frozen_argument else ()
        if state_shardings is None:  # a read-only function of (params, batch)
            self.jitted = jax.jit(fn, in_shardings=(None, self.batch_shardings, *frozen),
                                  out_shardings=replicated)
        else:
            self.jitted = jax.jit(fn, in_shardings=(state_shardings, self.batch_shardings, *frozen),
                                  out_shardings=(state_shardings, replicated), donate_argnums=0)
        if frozen_argument:
            self.jitted = WithFrozen(self.jitted, self)

    def __call__(self, state, batch):
        return self.jitted(state, self.place(batch))

    def bound(self, frozen):
        """This step (the same compiled program) with `frozen` as its base: a copy, so that the cached
        step never holds a base alive after its caller is done with it. Without a base (a full model),
        the step itself."""
        if frozen is None or not isinstance(self.jitted, WithFrozen):
            return self
        bound = copy.copy(self)
        bound.frozen, bound.jitted = frozen, WithFrozen(self.jitted.compiled, bound)
        return bound

    def place(self, batch):
        """Check this process's rows of a batch and turn them into global arrays sharded over
        ("data", "fsdp"): the global batch is every process's rows, in process order."""
        batch = self._checked(batch, processes=jax.process_count())
        return {f: parallel.place_batch_array(batch[f], self.batch_shardings[f]) for f in self.shapes}

    def place_global(self, batch):
        """Like `place`, for a batch that every process holds whole (the recipes compute their
        batches identically on every process)."""
        batch = self._checked(batch, processes=1)
        return {f: parallel.place_global_array(batch[f], self.batch_shardings[f]) for f in self.shapes}

    def _checked(self, batch, processes):
        if self.extra_keys and isinstance(batch, dict):
            batch = {f: batch[f] for f in self.shapes if f in batch}
        check_batch(batch, self.shapes, self.mesh, self.micro_batches, self.name, processes)
        return batch


class WithFrozen:
    """A jitted `fn(state, batch, frozen)` called as `(state, batch)`, with its step's frozen base."""

    def __init__(self, compiled, step):
        self.compiled, self.step = compiled, step

    def __call__(self, state, batch):
        return self.compiled(state, batch, self.step.frozen)

    def lower(self, state, batch):
        return self.compiled.lower(state, batch, self.step.frozen)

    def _cache_size(self):
        return self.compiled._cache_size()


def check_batch(batch, shapes, mesh, micro_batches, name, processes=1):
    """Raise ValueError saying what is wrong with a batch for step `name`, and what was expected.

    `shapes` maps each field to its symbolic shape (train/objectives.py): `N`, `T` and fixed sizes."""
    if not isinstance(batch, dict):
        raise ValueError(f"{name}: batch must be a dict of arrays with keys {sorted(shapes)}")
    missing, unknown = set(shapes) - set(batch), set(batch) - set(shapes)
    if missing or unknown:
        raise ValueError(f"{name}: batch keys {sorted(batch)}; missing {sorted(missing)}, "
                         f"unknown {sorted(unknown)}; expected {sorted(shapes)}")
    token_shape = tuple(np.shape(batch["tokens"]))
    bound = {}
    for f in ("tokens", *sorted(set(shapes) - {"tokens"})):
        shape, spec = tuple(np.shape(batch[f])), shapes[f]
        if len(shape) != len(spec):
            raise ValueError(f"{name}: {f} has shape {list(shape)}; expected {len(spec)} dimensions "
                             f"({_spec_text(spec)})")
        expected = [s if isinstance(s, int) else bound.get(s, d) for s, d in zip(spec, shape)]
        if list(shape) != expected:
            if f in TOKEN_FIELDS:
                raise ValueError(f"{name}: {f} has shape {list(shape)} but tokens have "
                                 f"{list(token_shape)}; expected the same")
            raise ValueError(f"{name}: {f} has shape {list(shape)} for {token_shape[0]} examples "
                             f"(tokens {list(token_shape)}); expected {expected} "
                             f"({_spec_text(spec)})")
        bound.update((s, d) for s, d in zip(spec, shape) if isinstance(s, str))
    n = token_shape[0] * processes
    data_shards = parallel.data_shards(mesh)
    if n % parallel.batch_multiple(mesh, micro_batches):
        raise ValueError(f"{name}: a global batch of {n} examples in {micro_batches} micro-batches "
                         f"does not divide over data × fsdp = {data_shards} devices; expected a "
                         f"batch size that is a multiple of {micro_batches * data_shards}")


def _spec_text(spec):
    return "[" + ", ".join(str(s) for s in spec) + "]"


def _check_micro_batches(micro_batches):
    if not isinstance(micro_batches, int) or micro_batches < 1:
        raise ValueError(f"micro_batches must be a positive integer; got {micro_batches!r}")


def _check_logprob_chunk(logprob_chunk):
    if not isinstance(logprob_chunk, int) or isinstance(logprob_chunk, bool) or logprob_chunk < 0:
        raise ValueError(f"logprob_chunk must be a non-negative integer (0: full logits); got "
                         f"{logprob_chunk!r}")


def _check_hyperparameters(objective, hyperparameters):
    wanted, given = set(objective.hyperparameters), set(hyperparameters)
    if wanted != given:
        raise ValueError(f"objective {objective.name!r} takes hyperparameters {sorted(wanted)}; got "
                         f"{sorted(given)}")
    for key, value in hyperparameters.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"objective {objective.name!r}: {key}={value}; expected a finite number")


def make_step(objective, model_def, optimizer, schedule, shardings, mesh, *, micro_batches=1,
              logprob_chunk=DEFAULT_LOGPROB_CHUNK, sampling_temperature=1.0, **hyperparameters):
    """The update step of the objective named `objective` (see train/objectives.py for the table and
    each objective's batch fields), e.g. make_step("sppo", ..., eta=1e3). logprob_chunk: token
    positions per chunk of logits (0: the full logits). sampling_temperature: the temperature the
    batch's responses were sampled at; a tempered objective (the policy gradients, whose ratio is
    against the sampler's log-probs) trains the policy at it, as verl and TRL do, so that the ratio is
    1 on fresh samples; the others ignore it."""
    _check_micro_batches(micro_batches)
    _check_logprob_chunk(logprob_chunk)
    spec = objectives.get(objective)
    _check_hyperparameters(spec, hyperparameters)
    temperature = float(sampling_temperature) if spec.tempered else 1.0
    if temperature <= 0:
        raise ValueError(f"objective {objective!r}: sampling_temperature={sampling_temperature}; "
                         "expected the positive temperature the batch was sampled at")

    def build():
        def fn(state, batch, frozen):
            loss_fn = partial(objective_loss, spec, hyperparameters, model_def.with_frozen(frozen),
                              logprob_chunk=logprob_chunk, temperature=temperature)
            return _update(loss_fn, optimizer, schedule, micro_batches, state, batch)
        return Step(f"{spec.name}_step", spec.batch_shapes, fn, mesh, micro_batches, shardings,
                    frozen_argument=True)

    leaves, structure = jax.tree.flatten(shardings)
    key = (objective, tuple(sorted(hyperparameters.items())), optimizer, schedule, micro_batches,
           logprob_chunk, temperature, tuple(leaves), structure)
    return _cached(_model_key(model_def, mesh) + key, build, model_def.frozen)


def make_logprobs(model_def, mesh, logprob_chunk=DEFAULT_LOGPROB_CHUNK):
    """logprobs(params, batch) -> [N] sequence log-probs over the loss mask (anchors, evaluation).

    The batch needs tokens, segment_ids and loss_mask; other keys (a training batch's) are ignored."""
    _check_logprob_chunk(logprob_chunk)

    def build():
        def fn(params, batch, frozen):
            return policy_logprobs(model_def.with_frozen(frozen), params,
                                   *(batch[f] for f in TOKEN_FIELDS), logprob_chunk=logprob_chunk)
        return Step("logprobs", LOGPROB_SHAPES, fn, mesh, 1, extra_keys=True, frozen_argument=True)

    return _cached(_model_key(model_def, mesh) + ("logprobs", logprob_chunk), build, model_def.frozen)


def make_kl(model_def, reference_def, mesh, logprob_chunk=DEFAULT_LOGPROB_CHUNK, temperature=1.0):
    """kl((params, reference_params), batch) -> [N] Σ_t KL(π(·|tokens_≤t) ‖ π_0(·|tokens_≤t)) over
    the loss mask, exact over the vocabulary (core/divergence.py), both at `temperature`,
    `logprob_chunk` positions at a time (0: all at once)."""
    _check_logprob_chunk(logprob_chunk)

    def build():
        def fn(both, batch, frozen):
            tokens, segment_ids, loss_mask = (batch[f] for f in TOKEN_FIELDS)
            models = [d.with_frozen(f).merge(p)
                      for d, p, f in zip((model_def, reference_def), both, frozen or (None, None))]
            hidden = [m.hidden_states(tokens[:, :-1], segment_ids=segment_ids[:, :-1])[0] for m in models]
            kl = divergence.chunked_token_kl(
                hidden[0], models[0].unembedding(), hidden[1], models[1].unembedding(), loss_mask[:, 1:],
                chunk=logprob_chunk or tokens.shape[0] * tokens.shape[1],
                softcap=models[0].config.final_logit_softcap,
                reference_softcap=models[1].config.final_logit_softcap, temperature=temperature)
            return jnp.sum(kl, axis=-1)
        return Step("kl", LOGPROB_SHAPES, fn, mesh, 1, extra_keys=True, frozen_argument=True)

    key = _model_key(model_def, mesh) + _model_key(reference_def, mesh) + ("kl", logprob_chunk,
                                                                              float(temperature))
    # LoRA bases are arguments, as in the other steps: never constants of the program, never stale
    frozen = (model_def.frozen, reference_def.frozen)
    return _cached(key, build, None if all(f is None for f in frozen) else frozen)


_STEPS = {}  # key -> Step, the most recent 32


def _model_key(model_def, mesh):
    """What identifies a model for compilation: its architecture (graphdef) and non-parameter state."""
    rest = jax.tree.leaves(model_def.rest)
    return (model_def.graphdef, jax.tree.structure(model_def.rest), tuple(map(id, rest)), mesh)


def _cached(key, build, frozen=None):
    """The step of `key` (built once), bound to `frozen`: a LoRA model's base is an argument of the
    compiled program, not part of its key, so that a base loaded again (each SPPO iteration) reuses it;
    the cache keeps the unbound step, so that it never holds an old base on the device."""
    if key not in _STEPS:
        if len(_STEPS) >= 32:
            _STEPS.pop(next(iter(_STEPS)))
        _STEPS[key] = build()
    return _STEPS[key].bound(frozen)
