"""The attention boundary: the fused path (jax.nn.dot_product_attention, XLA on CPU) equals the dense
reference on the same masks: padding, packed segments, sliding windows, GQA, decode over a cache, a shared prefix read in place."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nash_jax.models.attention import attention, attention_mask, prefix_attention

B, T, H, KV, D = 3, 12, 4, 2, 8


def qkv(seed, t=T, s=T):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(B, t, H, D)).astype(np.float32)
    k = rng.normal(size=(B, KV, s, D)).astype(np.float32)
    v = rng.normal(size=(B, KV, s, D)).astype(np.float32)
    return jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)


def segments():
    """Row 0 left-padded, row 1 right-padded, row 2 three packed sequences."""
    seg = np.zeros((B, T), np.int32)
    seg[0, 4:] = 1
    seg[1, :7] = 1
    seg[2] = [1] * 3 + [2] * 5 + [3] * 4
    return jnp.asarray(seg)


def max_real_diff(a, b, seg):
    real = np.asarray(seg) > 0
    return float(np.max(np.abs(np.asarray(a)[real] - np.asarray(b)[real])))


@pytest.mark.parametrize("window", [None, 3])
def test_fused_self_attention_equals_reference(window):
    q, k, v = qkv(0)
    seg = segments()
    outs = {impl: attention(q, k, v, q_segment_ids=seg, window=window, implementation=impl)
            for impl in ("reference", "xla")}
    diff = max_real_diff(outs["xla"], outs["reference"], seg)
    print(f"window {window}: max |xla - reference| = {diff:.2e}")
    assert diff <= 1e-5, diff
    assert np.all(np.isfinite(np.asarray(outs["xla"]))), "padding rows must stay finite"


def test_fused_gradients_equal_reference():
    q, k, v = qkv(1)
    seg = segments()

    def loss(impl):
        def f(q, k, v):
            out = attention(q, k, v, q_segment_ids=seg, window=5, implementation=impl)
            return jnp.sum(jnp.where((seg > 0)[:, :, None, None], out, 0) ** 2)
        return jax.grad(f, argnums=(0, 1, 2))(q, k, v)

    for a, b in zip(loss("reference"), loss("xla")):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("window", [None, 4])
def test_decode_over_a_cache_equals_reference(window):
    """Two new queries at slots 9, 10 over a 16-slot cache with left padding and empty slots."""
    q, k, v = qkv(2, t=2, s=16)
    kv_seg = np.zeros((B, 16), np.int32)
    kv_seg[:, 3:11] = 1
    kv_seg[1, :6] = 0  # a longer left pad in row 1
    q_seg = jnp.ones((B, 2), jnp.int32)
    args = dict(q_segment_ids=q_seg, kv_segment_ids=jnp.asarray(kv_seg), q_slots=9 + jnp.arange(2),
                kv_slots=jnp.arange(16), window=window)
    ref = attention(q, k, v, implementation="reference", **args)
    fused = attention(q, k, v, implementation="xla", **args)
    diff = float(np.max(np.abs(np.asarray(ref) - np.asarray(fused))))
    assert diff <= 1e-5, diff
    # The mask itself: slot 9 sees slots 3..9 (or its last 4 with a window), never empty slot 11+.
    mask = np.asarray(attention_mask(q_seg, jnp.asarray(kv_seg), 9 + jnp.arange(2), jnp.arange(16),
                                     window))
    expected = np.arange(3 if window is None else 6, 10)
    np.testing.assert_array_equal(np.flatnonzero(mask[0, 0]), expected)
    np.testing.assert_array_equal(np.flatnonzero(mask[1, 0]), expected[expected >= 6])


def test_auto_is_the_reference_on_cpu_and_splash_is_refused_off_tpu():
    q, k, v = qkv(3)
    seg = segments()
    auto = attention(q, k, v, q_segment_ids=seg, implementation="auto")
    ref = attention(q, k, v, q_segment_ids=seg, implementation="reference")
    np.testing.assert_array_equal(np.asarray(auto), np.asarray(ref))
    with pytest.raises(ValueError, match="'splash' runs on TPU only; this backend is 'cpu'"):
        attention(q, k, v, q_segment_ids=seg, implementation="splash")
    with pytest.raises(ValueError, match="attention implementation 'flash' is not one of"):
        attention(q, k, v, q_segment_ids=seg, implementation="flash")


@pytest.mark.parametrize("window, softcap", [(None, None), (5, 1.5)])
def test_prefix_attention_equals_attention_over_each_rows_copy_of_the_prefix(window, softcap):
    """Two prompts (left-padded prefixes of 6 slots), three right-padded rows each: the prefix read in
    place gives what attention over each row's own cache [prefix ‖ row] gives."""
    rng = np.random.default_rng(3)
    prompts, rows, p, t = 2, 3, 6, 5
    n = prompts * rows

    def normal(*shape):
        return jnp.asarray(rng.normal(size=shape).astype(np.float32))

    q, k, v = normal(n, t, H, D), normal(n, KV, t, D), normal(n, KV, t, D)
    prefix_k, prefix_v = normal(prompts, KV, p, D), normal(prompts, KV, p, D)
    prefix_seg = np.ones((prompts, p), np.int32)
    prefix_seg[1, :2] = 0  # prompt 1's head is 2 tokens shorter
    row_seg = np.ones((n, t), np.int32)
    row_seg[1, 3:], row_seg[4, 1:] = 0, 0
    prefix_seg, row_seg = jnp.asarray(prefix_seg), jnp.asarray(row_seg)
    got = prefix_attention(q, k, v, prefix_k, prefix_v, q_segment_ids=row_seg,
                           prefix_segment_ids=prefix_seg, window=window, softcap=softcap)

    def copied(prefix, own, axis):
        return jnp.concatenate([jnp.repeat(prefix, rows, axis=0), own], axis)

    want = attention(q, copied(prefix_k, k, 2), copied(prefix_v, v, 2), q_segment_ids=row_seg,
                     kv_segment_ids=copied(prefix_seg, row_seg, 1), q_slots=p + jnp.arange(t),
                     kv_slots=jnp.arange(p + t), window=window, implementation="reference",
                     softcap=softcap)
    assert max_real_diff(got, want, row_seg) <= 1e-6
    assert float(jnp.abs(jnp.where((row_seg == 0)[:, :, None, None], got, 0)).max()) == 0.0
