"""The synthetic task's exact evaluation of a policy: its exploitability under the oracle, from the
first response token's distribution (see tasks/synthetic/synthetic.py)."""

import jax
import jax.numpy as jnp
from flax import nnx

from nash_jax import parallel
from nash_jax.config import BUILTIN_SYNTHETIC
from nash_jax.parallel.padding import bucket_size, left_pad
from nash_jax.rollout.sampling import pad_id_of
from nash_jax.tasks.synthetic import synthetic


def has_exact_exploitability(judge_kind, model_path):
    """Whether exploitability is exact: the synthetic task's policy (model.path) judged by its own
    oracle (judge.kind)."""
    return judge_kind == "synthetic" and model_path == BUILTIN_SYNTHETIC


def exploitability(model, prompt_ids, tokenizer, mesh):
    """Exact mean exploitability under the synthetic oracle, from the first response token's
    distribution after each prompt."""
    width = bucket_size(max(len(p) for p in prompt_ids), minimum=8)
    tokens, segment_ids = left_pad(parallel.pad_to_shards(prompt_ids, mesh), width, pad_id_of(tokenizer))
    sharding = parallel.batch_sharding(mesh, 2)
    first = _next_token_logprobs(model, parallel.place_global_array(tokens, sharding),
                                 parallel.place_global_array(segment_ids, sharding))
    first = parallel.gather_to_host(first)[:len(prompt_ids)]
    return synthetic.mean_exploitability(synthetic.class_probabilities(first, tokenizer))


def policy_metrics(judge_kind, model_path, tokenizer, mesh):
    """For the report: model, prompt_ids -> {"exploitability": ...} where it is exact (see
    has_exact_exploitability), else None."""
    if not has_exact_exploitability(judge_kind, model_path):
        return None
    return lambda model, prompt_ids: {"exploitability": exploitability(model, prompt_ids, tokenizer,
                                                                        mesh)}


@nnx.jit
def _next_token_logprobs(model, tokens, segment_ids):
    logits, _ = model(tokens, segment_ids=segment_ids)
    return jax.nn.log_softmax(logits[:, -1].astype(jnp.float32))
