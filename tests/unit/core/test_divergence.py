"""The exact next-token KL: hand-computed values, PyTorch's kl_div, the chunked path equal to the full
one, and never negative."""

import jax
import jax.numpy as jnp
import numpy as np
import torch

from nash_jax.core import divergence
from nash_jax.core.losses import logits_from_hidden


def test_token_kl_equals_the_hand_computed_value():
    # p = (0.5, 0.5), q = softmax(log 0.9, log 0.1) = (0.9, 0.1): KL = 0.5 log(0.5/0.9) + 0.5 log(0.5/0.1)
    logits = jnp.log(jnp.array([[[0.5, 0.5], [0.5, 0.5]]]))
    reference = jnp.log(jnp.array([[[0.9, 0.1], [0.9, 0.1]]]))
    kl = divergence.token_kl(logits, reference, jnp.array([[True, False]]))
    expected = 0.5 * np.log(0.5 / 0.9) + 0.5 * np.log(0.5 / 0.1)
    np.testing.assert_allclose(np.asarray(kl), [[expected, 0.0]], rtol=1e-6)


def test_token_kl_equals_torch_kl_div_and_is_never_negative():
    rng = np.random.default_rng(0)
    logits, reference = (rng.normal(size=(3, 5, 11)).astype(np.float32) * 3 for _ in range(2))
    kl = np.asarray(divergence.token_kl(jnp.asarray(logits), jnp.asarray(reference),
                                        jnp.ones((3, 5), bool)))
    expected = torch.nn.functional.kl_div(torch.log_softmax(torch.tensor(reference), -1),
                                          torch.log_softmax(torch.tensor(logits), -1),
                                          log_target=True, reduction="none").sum(-1).numpy()
    np.testing.assert_allclose(kl, expected, atol=1e-5)
    same = divergence.token_kl(jnp.asarray(logits), jnp.asarray(logits), jnp.ones((3, 5), bool))
    assert (np.asarray(same) == 0).all() and (kl > 0).all()


def test_chunked_kl_equals_the_full_computation():
    rng = np.random.default_rng(1)
    hidden, reference_hidden = (jnp.asarray(rng.normal(size=(2, 7, 4)), jnp.float32) for _ in range(2))
    head, reference_head = (jnp.asarray(rng.normal(size=(9, 4)), jnp.float32) for _ in range(2))
    mask = jnp.asarray(rng.random((2, 7)) < 0.7)
    full = divergence.token_kl(logits_from_hidden(hidden, head, 5.0),
                               logits_from_hidden(reference_hidden, reference_head), mask)
    chunked = divergence.chunked_token_kl(hidden, head, reference_hidden, reference_head, mask,
                                          chunk=3, softcap=5.0)
    np.testing.assert_allclose(np.asarray(chunked), np.asarray(full), atol=1e-6)
    assert jax.numpy.all(chunked[~mask] == 0)
    # at the sampling temperature: the KL of the two tempered distributions
    tempered = divergence.token_kl(logits_from_hidden(hidden, head, 5.0) / 0.7,
                                   logits_from_hidden(reference_hidden, reference_head) / 0.7, mask)
    at_07 = divergence.chunked_token_kl(hidden, head, reference_hidden, reference_head, mask, chunk=3,
                                        softcap=5.0, temperature=0.7)
    np.testing.assert_allclose(np.asarray(at_07), np.asarray(tempered), atol=1e-6)
    assert not np.allclose(np.asarray(at_07), np.asarray(full))
