"""Chunked log-probs (core/losses.chunked_token_logprobs) equal the full-logits ones, values and
gradients, and the train steps give the same losses and updates with and without chunking."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from nash_jax.core import losses
from nash_jax.train import make_logprobs, make_step
from tests.unit.train.conftest import MESHES, mesh_of, setup, token_batch


def _inputs(b, n, e, v, dtype=jnp.float32, seed=0):
    keys = jax.random.split(jax.random.key(seed), 3)
    hidden = jax.random.normal(keys[0], (b, n, e)).astype(dtype)
    head = 0.3 * jax.random.normal(keys[1], (v, e))
    targets = jax.random.randint(keys[2], (b, n), 0, v)
    rng = np.random.default_rng(seed)
    mask = rng.uniform(size=(b, n)) < 0.7
    mask[0, :] = False  # a fully masked (padding) row
    targets = jnp.where(jnp.asarray(mask), targets, -100)  # masked targets may be anything
    return hidden, head, targets, jnp.asarray(mask)


def _full(hidden, head, targets, mask):
    logits = jnp.einsum("bne,ve->bnv", hidden, head.astype(hidden.dtype)).astype(jnp.float32)
    return losses.token_logprobs(logits, targets, mask)


def _weighted_sum(fn, weights):
    return lambda h, w, t, m: jnp.sum(fn(h, w, t, m) * weights)


@pytest.mark.parametrize("chunk", [1, 5, 7, 16, 40, 1000])  # dividing B·N or not, one chunk or all
def test_chunked_logprobs_equal_full_values_and_gradients(chunk):
    hidden, head, targets, mask = _inputs(b=4, n=10, e=8, v=33)
    weights = jax.random.normal(jax.random.key(9), targets.shape)
    full = _full(hidden, head, targets, mask)
    chunked = losses.chunked_token_logprobs(hidden, head, targets, mask, chunk=chunk)
    diff = float(jnp.max(jnp.abs(full - chunked)))
    assert diff <= 1e-5, f"log-prob difference {diff}"
    assert float(jnp.max(jnp.abs(jnp.where(mask, 0.0, chunked)))) == 0.0  # exactly 0 off the mask

    def chunked_fn(h, w, t, m):
        return losses.chunked_token_logprobs(h, w, t, m, chunk=chunk)

    grads_full = jax.grad(_weighted_sum(_full, weights), argnums=(0, 1))(hidden, head, targets, mask)
    grads_chunked = jax.jit(jax.grad(_weighted_sum(chunked_fn, weights), argnums=(0, 1)))(
        hidden, head, targets, mask)
    for name, a, b in zip(("hidden", "unembedding"), grads_full, grads_chunked):
        diff = float(jnp.max(jnp.abs(a - b)))
        assert diff <= 1e-5, f"gradient wrt {name} differs by {diff}"
        assert float(jnp.max(jnp.abs(a))) > 1e-3  # the gradient is not trivially zero


def test_chunked_logprobs_with_a_final_softcap_equal_the_capped_full_logits():
    """Gemma 2's final soft-cap (cap · tanh(logits / cap)) applied in the chunks: values and gradients
    equal those of the capped full logits, and differ from the uncapped ones."""
    hidden, head, targets, mask = _inputs(b=4, n=10, e=8, v=33)
    hidden = 4.0 * hidden  # logits of a few units, where a cap of 2 bends them
    weights = jax.random.normal(jax.random.key(9), targets.shape)

    def capped_full(h, w, t, m):
        logits = jnp.einsum("bne,ve->bnv", h, w).astype(jnp.float32)
        return losses.token_logprobs(2.0 * jnp.tanh(logits / 2.0), t, m)

    def chunked(h, w, t, m):
        return losses.chunked_token_logprobs(h, w, t, m, chunk=7, softcap=2.0)

    args = (hidden, head, targets, mask)
    diff = float(jnp.max(jnp.abs(capped_full(*args) - chunked(*args))))
    assert diff <= 1e-5, f"capped log-prob difference {diff}"
    assert float(jnp.max(jnp.abs(_full(*args) - chunked(*args)))) > 0.1  # the cap is not a no-op
    grads = [jax.grad(_weighted_sum(fn, weights), argnums=(0, 1))(*args) for fn in (capped_full, chunked)]
    worst = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(*grads))
    assert worst <= 1e-5, f"capped gradient difference {worst}"


@pytest.mark.parametrize("softcap", [None, 2.0])
def test_chunked_logprobs_at_a_temperature_equal_the_full_tempered_logits(softcap):
    """The sampler's distribution at temperature 0.7 (logits, capped or not, divided by 0.7): values
    and gradients of the chunked path equal the full path's, and differ from temperature 1's."""
    hidden, head, targets, mask = _inputs(b=4, n=10, e=8, v=33)
    hidden = 4.0 * hidden
    weights = jax.random.normal(jax.random.key(9), targets.shape)

    def tempered_full(h, w, t, m):
        logits = jnp.einsum("bne,ve->bnv", h, w).astype(jnp.float32)
        if softcap is not None:
            logits = softcap * jnp.tanh(logits / softcap)
        return losses.token_logprobs(logits / 0.7, t, m)

    def chunked(h, w, t, m):
        return losses.chunked_token_logprobs(h, w, t, m, chunk=7, softcap=softcap, temperature=0.7)

    args = (hidden, head, targets, mask)
    diff = float(jnp.max(jnp.abs(tempered_full(*args) - chunked(*args))))
    assert diff <= 1e-5, f"tempered log-prob difference {diff}"
    untempered = losses.chunked_token_logprobs(*args, chunk=7, softcap=softcap)
    assert float(jnp.max(jnp.abs(untempered - chunked(*args)))) > 0.1
    grads = [jax.grad(_weighted_sum(fn, weights), argnums=(0, 1))(*args)
             for fn in (tempered_full, chunked)]
    worst = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(*grads))
    assert worst <= 1e-5, f"tempered gradient difference {worst}"


def test_chunked_logprobs_in_bf16_agree_with_the_bf16_full_path_to_bf16_rounding():
    """bf16 logits are rounded to 8 bits of mantissa, and a [chunk, E] matmul may sum in another order
    than a [B, N, E] one: agreement to a bf16 step of the logits (≈ 0.016 at |logit| ≈ 4), not 1e-5."""
    hidden, head, targets, mask = _inputs(b=2, n=9, e=16, v=50, dtype=jnp.bfloat16)
    full = _full(hidden, head, targets, mask)
    chunked = losses.chunked_token_logprobs(hidden, head, targets, mask, chunk=4)
    assert chunked.dtype == jnp.float32
    diff = float(jnp.max(jnp.abs(full - chunked)))
    assert diff <= 1e-2, f"bf16 log-prob difference {diff}"


def test_chunked_gradients_in_bf16_agree_with_the_bf16_full_path_to_bf16_rounding():
    """The hand-written backward (core/losses._chunked_logprobs_bwd) in bf16: gradients wrt the
    hidden states and the head agree with autodiff through the bf16 full logits to bf16 rounding
    (the head's gradient is summed over chunks in fp32 there, in bf16 by autodiff)."""
    hidden, head, targets, mask = _inputs(b=2, n=9, e=16, v=50, dtype=jnp.bfloat16)
    weights = jax.random.normal(jax.random.key(9), targets.shape)

    def chunked_fn(h, w, t, m):
        return losses.chunked_token_logprobs(h, w, t, m, chunk=4)

    grads = [jax.grad(_weighted_sum(fn, weights), argnums=(0, 1))(hidden, head, targets, mask)
             for fn in (_full, chunked_fn)]
    for name, a, b in zip(("hidden", "unembedding"), *grads):
        assert a.dtype == b.dtype, (name, a.dtype, b.dtype)
        a, b = a.astype(jnp.float32), b.astype(jnp.float32)
        scale = float(jnp.max(jnp.abs(a)))
        diff = float(jnp.max(jnp.abs(a - b)))
        assert diff <= 2e-2 * scale, f"bf16 gradient wrt {name} differs by {diff} (max |grad| {scale})"


@pytest.mark.parametrize("shape", MESHES[1:])
def test_chunked_gradients_on_a_mesh_equal_one_devices(shape):
    """The hand-written backward on each test mesh, the positions sharded over data × fsdp and the
    head's vocabulary over tensor: log-probs and gradients equal one device's to fp32 summation
    order (the reductions over sharded rows and words are split differently, nothing else)."""
    hidden, head, targets, mask = _inputs(b=8, n=10, e=8, v=40)
    weights = jax.random.normal(jax.random.key(9), targets.shape)

    def value_and_grads(h, w, t, m):
        def total(h, w):
            return jnp.sum(losses.chunked_token_logprobs(h, w, t, m, chunk=7) * weights)
        return jax.jit(jax.value_and_grad(total, argnums=(0, 1)))(h, w)

    mesh = mesh_of(shape)
    rows, words = NamedSharding(mesh, P(("data", "fsdp"))), NamedSharding(mesh, P("tensor"))
    placed = [jax.device_put(x, s) for x, s in zip((hidden, head, targets, mask),
                                                    (rows, words, rows, rows))]
    (one_value, one_grads), (mesh_value, mesh_grads) = (value_and_grads(*args)
                                                        for args in ((hidden, head, targets, mask), placed))
    assert abs(float(mesh_value) - float(one_value)) <= 1e-6 * abs(float(one_value))
    for name, a, b in zip(("hidden", "unembedding"), one_grads, mesh_grads):
        scale = float(jnp.max(jnp.abs(a)))
        diff = float(jnp.max(jnp.abs(a - np.asarray(b))))
        assert diff <= 1e-6 * scale, f"{shape}: gradient wrt {name} differs by {diff} (max {scale})"


def test_chunked_backward_never_holds_the_full_logits():
    """Compiled temporary memory of value-and-grad: chunked well below the [B, N, V] fp32 logits."""
    b, n, e, v = 4, 256, 32, 4096
    hidden = jax.ShapeDtypeStruct((b, n, e), jnp.float32)
    head = jax.ShapeDtypeStruct((v, e), jnp.float32)
    targets = jax.ShapeDtypeStruct((b, n), jnp.int32)
    mask = jax.ShapeDtypeStruct((b, n), jnp.bool_)

    def temp_bytes(fn):
        grad = jax.jit(jax.grad(lambda h, w, t, m: jnp.sum(fn(h, w, t, m)), argnums=(0, 1)))
        return grad.lower(hidden, head, targets, mask).compile().memory_analysis().temp_size_in_bytes

    logits_bytes = b * n * v * 4
    full = temp_bytes(_full)
    chunked = temp_bytes(lambda h, w, t, m: losses.chunked_token_logprobs(h, w, t, m, chunk=128))
    assert full >= logits_bytes, (full, logits_bytes)
    assert chunked * 4 <= full, f"chunked {chunked} bytes vs full {full} bytes"


def test_chunk_must_be_positive():
    hidden, head, targets, mask = _inputs(b=1, n=3, e=4, v=5)
    with pytest.raises(ValueError, match="chunk=0"):
        losses.chunked_token_logprobs(hidden, head, targets, mask, chunk=0)


@pytest.mark.parametrize("kind", ["sppo", "dpo"])
def test_steps_with_chunked_logprobs_equal_full_ones(kind):
    """Two steps of the same objective, full logits vs chunks of 5 positions: same losses, gradient
    norms and parameters."""
    results = {}
    for chunk in (0, 5):
        model_def, state, shardings, mesh, tx, schedule, _ = setup()
        lead = (2,) if kind == "dpo" else ()
        batch = token_batch(8, lead=lead) if not lead else {
            k: v.swapaxes(0, 1) for k, v in token_batch(8, lead=lead).items()}
        logprobs = make_logprobs(model_def, mesh, logprob_chunk=chunk)
        if kind == "sppo":
            batch["anchor_logp"] = np.asarray(logprobs(state.params, batch)) - 0.1
            batch["win_rate"] = np.linspace(0, 1, 8).astype(np.float32)
            step = make_step("sppo", model_def, tx, schedule, shardings, mesh, eta=5.0,
                             logprob_chunk=chunk)
        else:
            flat = {k: v.reshape(16, -1) for k, v in batch.items()}
            batch["anchor_logp"] = np.asarray(logprobs(state.params, flat)).reshape(8, 2) - 0.1
            step = make_step("dpo", model_def, tx, schedule, shardings, mesh, beta=0.1,
                             logprob_chunk=chunk)
        metrics = []
        for _ in range(2):
            state, m = step(state, batch)
            metrics.append({k: float(m[k]) for k in ("loss", "grad_norm")})
        results[chunk] = (metrics, jax.tree.leaves(state.params), batch["anchor_logp"])
    (m_full, p_full, a_full), (m_chunk, p_chunk, a_chunk) = results[0], results[5]
    np.testing.assert_allclose(a_chunk, a_full, atol=1e-5)
    for full, chunked in zip(m_full, m_chunk):
        for key in full:
            assert abs(full[key] - chunked[key]) <= 1e-5 * max(1.0, abs(full[key])), (key, full, chunked)
    diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(p_full, p_chunk))
    assert diff <= 1e-6, f"parameters after two steps differ by {diff}"
