"""Jit-compiled update steps: SPPO (soft), pairwise (SPPO-hard, DPO, IPO), Nash-MD-PG and supervised.

A step is `step(state, batch) -> (state, metrics)`: pure, compiled once with its shardings stated, the
state donated. Batches are dicts of arrays whose first axis is the example; token arrays hold prompt and
response together, `segment_ids` marks real tokens (0 = padding), and `loss_mask` marks the response
tokens whose log-probs count. Token t is predicted from tokens < t, so position 0 never counts.

Gradients are accumulated over `micro_batches` inside the step with `lax.scan`; micro-batch j takes the
examples j, j + M, j + 2M, ... so that every micro-batch stays spread over all data-parallel devices. A
step whose loss or gradient is not finite leaves parameters and optimiser state untouched and reports
`skipped = 1`.
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec

from nash_jax import parallel
from nash_jax.core import losses
from nash_jax.train.state import TrainState

TOKEN_FIELDS = ("tokens", "segment_ids", "loss_mask")
SPPO_FIELDS = {"tokens": 2, "segment_ids": 2, "loss_mask": 2, "anchor_logp": 1, "win_rate": 1}
PAIR_FIELDS = {"tokens": 3, "segment_ids": 3, "loss_mask": 3, "anchor_logp": 2}  # [N, 2 = (w, l), ...]
NASH_MD_FIELDS = {"tokens": 2, "segment_ids": 2, "loss_mask": 2, "ref_logp": 1, "pref": 1}
LOGPROB_FIELDS = {"tokens": 2, "segment_ids": 2, "loss_mask": 2}
PAIR_LOSSES = {"sppo_hard": losses.sppo_hard_loss, "dpo": losses.dpo_loss, "ipo": losses.ipo_loss}


def policy_logprobs(model_def, params, tokens, segment_ids, loss_mask):
    """Σ_t log π(tokens_t | tokens_<t) over loss-mask positions → [N] float32."""
    logits, _ = model_def.merge(params)(tokens[:, :-1], segment_ids=segment_ids[:, :-1])
    return losses.sequence_logprobs(logits, tokens[:, 1:], loss_mask[:, 1:])


def sppo_objective(model_def, params, batch, *, eta):
    """Soft SPPO: regress log π_θ(y)/π_t(y) on η (P̂(y) − 1/2)."""
    logp = policy_logprobs(model_def, params, *(batch[f] for f in TOKEN_FIELDS))
    loss = losses.sppo_loss(logp, batch["anchor_logp"], batch["win_rate"], eta)
    log_ratio = logp - batch["anchor_logp"]
    target = eta * (batch["win_rate"] - 0.5)
    reached = jnp.where(target >= 0, log_ratio >= target, log_ratio <= target)
    return loss, {"log_ratio": log_ratio, "target_reached": reached.astype(jnp.float32)}


def pair_objective(model_def, params, batch, *, loss_fn, beta):
    """A pairwise loss on (winner, loser): SPPO-hard, DPO or IPO."""
    n, _, t = batch["tokens"].shape
    flat = [batch[f].reshape(2 * n, t) for f in TOKEN_FIELDS]
    logp = policy_logprobs(model_def, params, *flat).reshape(n, 2)
    anchor = batch["anchor_logp"]
    loss = loss_fn(logp[:, 0], anchor[:, 0], logp[:, 1], anchor[:, 1], beta)
    log_ratio = logp - anchor
    margin = log_ratio[:, 0] - log_ratio[:, 1]
    return loss, {"log_ratio": log_ratio, "margin_positive": (margin > 0).astype(jnp.float32)}


def nash_md_pg_objective(model_def, params, batch, *, tau):
    """Regularised REINFORCE against a mixture opponent: reward P(y ≻ y'), baseline 1/2, KL weight τ."""
    logp = policy_logprobs(model_def, params, *(batch[f] for f in TOKEN_FIELDS))
    loss = losses.nash_md_pg_loss(logp, batch["ref_logp"], batch["pref"], tau)
    return loss, {"log_ratio": logp - batch["ref_logp"]}


def sft_objective(model_def, params, batch):
    """Supervised fine-tuning: mean negative log-likelihood per loss-mask token."""
    logits, _ = model_def.merge(params)(batch["tokens"][:, :-1], segment_ids=batch["segment_ids"][:, :-1])
    mask = batch["loss_mask"][:, 1:]
    token_logp = losses.token_logprobs(logits, batch["tokens"][:, 1:], mask)
    loss = -jnp.sum(token_logp) / jnp.maximum(jnp.sum(mask), 1)
    return loss, {"log_ratio": jnp.sum(token_logp, axis=-1)}  # sequence log-probs, for the metrics


def _micro_split(batch, micro_batches):
    """[N, ...] -> [M, N/M, ...] with micro-batch j = examples j, j + M, ..."""
    def split(x):
        return x.reshape(x.shape[0] // micro_batches, micro_batches, *x.shape[1:]).swapaxes(0, 1)
    return jax.tree.map(split, batch)


def _micro_join(per_example):
    """Inverse of _micro_split for per-example outputs."""
    def join(x):
        return x.swapaxes(0, 1).reshape(x.shape[0] * x.shape[1], *x.shape[2:])
    return jax.tree.map(join, per_example)


def loss_and_grads(objective, model_def, params, batch, micro_batches=1):
    """(mean loss, per-example outputs, mean gradient), accumulated over micro-batches with lax.scan.

    Each micro-batch's loss is a mean over its examples and they are equal in size, so the mean of the
    micro-batch losses (and gradients) equals the full-batch mean.
    """
    value_and_grad = jax.value_and_grad(partial(objective, model_def), has_aux=True)
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


def _update(objective, model_def, optimizer, schedule, micro_batches, state, batch):
    loss, per_example, grads = loss_and_grads(objective, model_def, state.params, batch, micro_batches)
    grad_norm = optax.tree.norm(grads)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)

    def keep_if_finite(new, old):
        return jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, old)

    new_state = TrainState(params=keep_if_finite(params, state.params),
                           opt_state=keep_if_finite(opt_state, state.opt_state),
                           step=state.step + finite.astype(jnp.int32), key=state.key)
    log_ratio = per_example.pop("log_ratio")
    metrics = {
        "loss": loss,
        "grad_norm": grad_norm,
        "learning_rate": schedule(state.step),
        "log_ratio_mean": jnp.mean(log_ratio),
        "log_ratio_min": jnp.min(log_ratio),
        "log_ratio_max": jnp.max(log_ratio),
        "tokens": jnp.sum(batch["loss_mask"][..., 1:]).astype(jnp.float32),
        "skipped": 1.0 - finite.astype(jnp.float32),
        **{name: jnp.mean(values) for name, values in per_example.items()},
    }
    return new_state, metrics


class Step:
    """A jitted pure step plus the checks and placement of its batches (at the edge, not inside jit).

    Call as `state, metrics = step(state, batch)`; `step.jitted` is the bare compiled function.
    """

    def __init__(self, name, fields, fn, mesh, micro_batches, state_shardings=None, extra_keys=False):
        self.name, self.fields, self.mesh, self.micro_batches = name, fields, mesh, micro_batches
        self.extra_keys = extra_keys  # ignore keys beyond `fields` instead of refusing them
        self.batch_shardings = {f: parallel.batch_sharding(mesh, ndim) for f, ndim in fields.items()}
        replicated = NamedSharding(mesh, PartitionSpec())
        if state_shardings is None:  # a read-only function of (params, batch)
            self.jitted = jax.jit(fn, in_shardings=(None, self.batch_shardings),
                                  out_shardings=replicated)
        else:
            self.jitted = jax.jit(fn, in_shardings=(state_shardings, self.batch_shardings),
                                  out_shardings=(state_shardings, replicated), donate_argnums=0)

    def __call__(self, state, batch):
        return self.jitted(state, self.place(batch))

    def place(self, batch):
        """Check this process's rows of a batch and turn them into global arrays sharded over
        ("data", "fsdp"): the global batch is every process's rows, in process order."""
        batch = self._checked(batch, processes=jax.process_count())
        return {f: parallel.place_batch_array(batch[f], self.batch_shardings[f]) for f in self.fields}

    def place_global(self, batch):
        """Like `place`, for a batch that every process holds whole (the recipes compute their
        batches identically on every process)."""
        batch = self._checked(batch, processes=1)
        return {f: parallel.place_global_array(batch[f], self.batch_shardings[f]) for f in self.fields}

    def _checked(self, batch, processes):
        if self.extra_keys and isinstance(batch, dict):
            batch = {f: batch[f] for f in self.fields if f in batch}
        check_batch(batch, self.fields, self.mesh, self.micro_batches, self.name, processes)
        return batch


def check_batch(batch, fields, mesh, micro_batches, name, processes=1):
    """Raise ValueError saying what is wrong with a batch for step `name`, and what was expected."""
    if not isinstance(batch, dict):
        raise ValueError(f"{name}: batch must be a dict of arrays with keys {sorted(fields)}")
    missing, unknown = set(fields) - set(batch), set(batch) - set(fields)
    if missing or unknown:
        raise ValueError(f"{name}: batch keys {sorted(batch)}; missing {sorted(missing)}, "
                         f"unknown {sorted(unknown)}; expected {sorted(fields)}")
    shapes = {f: tuple(np.shape(batch[f])) for f in fields}
    for f, ndim in fields.items():
        if len(shapes[f]) != ndim:
            raise ValueError(f"{name}: {f} has shape {list(shapes[f])}; expected {ndim} dimensions")
    token_shape = shapes["tokens"]
    for f in ("segment_ids", "loss_mask"):
        if shapes[f] != token_shape:
            raise ValueError(f"{name}: {f} has shape {list(shapes[f])} but tokens have "
                             f"{list(token_shape)}; expected the same")
    local_n = token_shape[0]
    for f in fields:
        if shapes[f][:1] != (local_n,) or (fields[f] >= 2 and f not in TOKEN_FIELDS
                                           and shapes[f][1:] != token_shape[1:-1]):
            raise ValueError(f"{name}: {f} has shape {list(shapes[f])} for {local_n} examples "
                             f"(tokens {list(token_shape)}); expected {[local_n, *token_shape[1:-1]]}")
    n = local_n * processes
    data_shards = parallel.data_shards(mesh)
    if n % micro_batches or (n // micro_batches) % data_shards:
        raise ValueError(f"{name}: a global batch of {n} examples in {micro_batches} micro-batches "
                         f"does not divide over data × fsdp = {data_shards} devices; expected a "
                         f"batch size that is a multiple of {micro_batches * data_shards}")


def _check_micro_batches(micro_batches):
    if not isinstance(micro_batches, int) or micro_batches < 1:
        raise ValueError(f"micro_batches must be a positive integer; got {micro_batches!r}")


def make_sppo_step(model_def, optimizer, schedule, shardings, mesh, *, eta, micro_batches=1):
    """The soft SPPO step; batch: tokens, segment_ids, loss_mask [N, T], anchor_logp, win_rate [N]."""
    _check_micro_batches(micro_batches)
    objective = partial(sppo_objective, eta=eta)
    fn = partial(_update, objective, model_def, optimizer, schedule, micro_batches)
    return Step("sppo_step", SPPO_FIELDS, fn, mesh, micro_batches, shardings)


def make_pair_step(model_def, optimizer, schedule, shardings, mesh, *, loss, beta, micro_batches=1):
    """A pairwise step (loss: sppo_hard, dpo or ipo); batch: tokens, segment_ids, loss_mask
    [N, 2, T] with the winner at index 0 and the loser at 1, anchor_logp [N, 2]."""
    _check_micro_batches(micro_batches)
    if loss not in PAIR_LOSSES:
        raise ValueError(f"pairwise loss {loss!r} is not one of {sorted(PAIR_LOSSES)}")
    objective = partial(pair_objective, loss_fn=PAIR_LOSSES[loss], beta=beta)
    fn = partial(_update, objective, model_def, optimizer, schedule, micro_batches)
    return Step(f"pair_step[{loss}]", PAIR_FIELDS, fn, mesh, micro_batches, shardings)


def make_nash_md_pg_step(model_def, optimizer, schedule, shardings, mesh, *, tau, micro_batches=1):
    """The Nash-MD-PG step; batch: tokens, segment_ids, loss_mask [N, T] of policy samples y,
    ref_logp [N] = log μ(y), pref [N] = P(y ≻ y') against a mixture sample y'."""
    _check_micro_batches(micro_batches)
    objective = partial(nash_md_pg_objective, tau=tau)
    fn = partial(_update, objective, model_def, optimizer, schedule, micro_batches)
    return Step("nash_md_pg_step", NASH_MD_FIELDS, fn, mesh, micro_batches, shardings)


def make_sft_step(model_def, optimizer, schedule, shardings, mesh, *, micro_batches=1):
    """A supervised step (warm starts); batch: tokens, segment_ids, loss_mask [N, T]."""
    _check_micro_batches(micro_batches)
    fn = partial(_update, sft_objective, model_def, optimizer, schedule, micro_batches)
    return Step("sft_step", LOGPROB_FIELDS, fn, mesh, micro_batches, shardings)


def make_logprobs(model_def, mesh):
    """logprobs(params, batch) -> [N] sequence log-probs over the loss mask (anchors, evaluation).

    The batch needs tokens, segment_ids and loss_mask; other keys (a training batch's) are ignored."""
    def fn(params, batch):
        return policy_logprobs(model_def, params, *(batch[f] for f in TOKEN_FIELDS))
    return Step("logprobs", LOGPROB_FIELDS, fn, mesh, 1, extra_keys=True)

