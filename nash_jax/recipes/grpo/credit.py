"""Credit for one step's rollouts: the rollouts as columns (prompt-major: the K samples of prompt b are
rows b·K … b·K + K − 1), the advantage of each within its prompt's group of K, and the `pg` batch."""

import jax
import jax.numpy as jnp
import numpy as np

from nash_jax.core import advantages as adv
from nash_jax.rollout.batches import pg_batch

_advantages = jax.jit(adv.group_advantages, static_argnames=("num_groups", "mode", "ddof", "eps"))
_degenerate = jax.jit(adv.degenerate_groups, static_argnames=("num_groups",))


def rollout_columns(samples, prompts, prompt_ids, tokenizer):
    """generate()'s Samples of B prompts × K → {prompt, prompt_ids, response, response_ids,
    behaviour_logp (per response token, under the distribution sampled), length, finished}, B·K each."""
    batch, k = samples.lengths.shape
    columns = {name: [] for name in ("prompt", "prompt_ids", "response", "response_ids",
                                     "behaviour_logp", "length", "finished")}
    for b in range(batch):
        for j in range(k):
            n = int(samples.lengths[b, j])
            tokens = samples.tokens[b, j, :n].tolist()
            columns["prompt"].append(prompts[b])
            columns["prompt_ids"].append(list(prompt_ids[b]))
            columns["response"].append(tokenizer.decode(tokens, skip_special_tokens=True))
            columns["response_ids"].append(tokens)
            columns["behaviour_logp"].append(samples.logprobs[b, j, :n])
            columns["length"].append(n)
            columns["finished"].append(bool(samples.finished[b, j]))
    return columns


def group_credit(rewards, k, mode):
    """rewards [B·K] (prompt-major) → (advantages [B·K] float32 by core.advantages.group_advantages in
    `mode`, one group per prompt; the share of prompts whose K rewards are all equal, which teach
    nothing)."""
    rewards = jnp.asarray(rewards, jnp.float32)
    prompts = rewards.shape[0] // k
    groups = jnp.repeat(jnp.arange(prompts, dtype=jnp.int32), k)
    a = _advantages(rewards, groups, num_groups=prompts, mode=mode)
    return np.asarray(a, np.float32), float(np.mean(_degenerate(rewards, groups, num_groups=prompts)))


def step_batch(rollouts, advantages, pad_id, rows, width=None):
    """The `pg` batch of the rollouts with their advantages, `rows` rows of `width` tokens
    (rollouts.pg_batch)."""
    return pg_batch(rollouts["prompt_ids"], rollouts["response_ids"], rollouts["behaviour_logp"],
                    advantages, pad_id, rows, width)
