"""KL(π_t ‖ π_0) along sampled responses (the reports' "KL to pi_0"): the exact per-token KL of two
real models' forwards, 0 against itself, and its mean an estimate of what the sampled log-ratio
estimates, without ever going negative."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nash_jax import parallel
from nash_jax.core import divergence
from nash_jax.models.llama import Llama, LlamaConfig
from nash_jax.rollout.batches import sequence_kls, sequence_logprobs
from nash_jax.rollout.sampling import generate

PROMPTS = [[5, 6, 7], [9, 3]]


class Tokenizer:  # what sequence_kls reads of a tokenizer: its padding id
    pad_token_id, eos_token_id = 0, 1


def tiny(seed):
    config = LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_layers=2, num_heads=2,
                         num_kv_heads=1, head_dim=8)
    return Llama(config, rngs=nnx.Rngs(seed))


def test_sequence_kl_is_the_sum_of_exact_token_kls_along_each_response():
    policy, reference = tiny(0), tiny(1)
    mesh = parallel.make_mesh(devices=jax.devices()[:1])
    responses = [[[2, 3, 4], [7]], [[8, 8], [3, 2, 1, 4]]]
    kls = sequence_kls(policy, reference, PROMPTS, responses, Tokenizer(), mesh)
    for b, prompt in enumerate(PROMPTS):
        for k, response in enumerate(responses[b]):
            tokens = jnp.asarray([prompt + response])
            logits, _ = policy(tokens[:, :-1])
            reference_logits, _ = reference(tokens[:, :-1])
            mask = jnp.asarray([[False] * (len(prompt) - 1) + [True] * len(response)])
            expected = float(jnp.sum(divergence.token_kl(logits, reference_logits, mask)))
            assert abs(kls[b][k] - expected) <= 1e-5 * max(1.0, expected), (b, k, kls[b][k], expected)
    assert sequence_kls(policy, policy, PROMPTS, responses, Tokenizer(), mesh) == [[0.0, 0.0], [0.0, 0.0]]


def test_its_mean_over_samples_matches_the_sampled_log_ratio_and_is_never_negative():
    policy, reference = tiny(0), tiny(1)
    mesh = parallel.make_mesh(devices=jax.devices()[:1])
    s = generate(policy, [PROMPTS[0]], num_samples=512, max_new_tokens=3, temperature=1.0,
                 key=jax.random.PRNGKey(0), eos_token_ids=[])
    responses = [[s.tokens[0, k, :s.lengths[0, k]].tolist() for k in range(512)]]
    kls = np.asarray(sequence_kls(policy, reference, [PROMPTS[0]], responses, Tokenizer(), mesh))
    ratios = (np.asarray(sequence_logprobs(policy, [PROMPTS[0]], responses, Tokenizer(), mesh))
              - np.asarray(sequence_logprobs(reference, [PROMPTS[0]], responses, Tokenizer(), mesh)))
    assert (kls >= 0).all()
    standard_error = np.std(ratios) / np.sqrt(ratios.size)
    assert abs(kls.mean() - ratios.mean()) < 4 * standard_error, (kls.mean(), ratios.mean(), standard_error)
