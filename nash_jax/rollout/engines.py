"""Which engine samples a fixed policy (`sampling.engine`): nash_jax's own sampler (rollout/sampling.py)
or vLLM on the policy's exported Hugging Face directory (rollout/vllm_engine.py). Either way the stage
gets the same columns (batches.sample_rows'), with logp = Σ log π(y) untempered as nash_jax computes it:
with vLLM by nash_jax's own teacher-forced forward (exactly the numerics the loss uses), vLLM's own
sum kept beside it as `logp_vllm` and their largest difference returned for the stage's info.
"""

import shutil

import numpy as np

from nash_jax import runs
from nash_jax.rollout.batches import sample_rows, sequence_logprobs
from nash_jax.rollout.sampling import eos_ids_of

ENGINES = ("nash_jax", "vllm")


def sample_policy(model, policy_dir, tokenizer, prompt_ids, *, num_samples, sampling, key_of, mesh,
                  desc, work_dir, dtype="float32", max_new_tokens=None, crash_prefix=None):
    """K samples per prompt from `model`, the policy exported at `policy_dir` → (columns, info).

    columns: sample_rows' (response_ids, responses, lengths, logp, finished), and with vLLM also
    logp_vllm; info: what the stage records in its manifest entry ({} for nash_jax; the engine and
    the largest |logp − logp_vllm| for vLLM). `work_dir`: where vLLM's finished
    batches wait until the stage is written (removed by `clean_up`)."""
    if sampling.engine == "nash_jax":
        return sample_rows(model, tokenizer, prompt_ids, num_samples=num_samples, sampling=sampling,
                           key_of=key_of, mesh=mesh, desc=desc, max_new_tokens=max_new_tokens,
                           crash_prefix=crash_prefix), {}
    import jax

    from nash_jax.rollout.vllm_engine import sample_policy_vllm

    if jax.process_count() > 1:
        raise ValueError("sampling.engine=vllm runs in a single-process run only (one vLLM worker "
                         f"beside one JAX process); this run has {jax.process_count()} processes")
    bar = runs.progress(len(prompt_ids), desc + " (vLLM)", "prompt")

    def on_batch(index):
        bar.update(min(sampling.prompts_per_batch, len(prompt_ids) - index * sampling.prompts_per_batch))
        if crash_prefix:
            runs.crash_point(f"{crash_prefix}:batch={index + 1}")

    columns = sample_policy_vllm(policy_dir, prompt_ids, num_samples=num_samples,
                                 sampling=sampling, key_of=key_of,
                                 max_new_tokens=max_new_tokens or sampling.max_new_tokens,
                                 eos_ids=eos_ids_of(tokenizer), dtype=dtype, work_dir=work_dir,
                                 on_batch=on_batch)
    bar.close()
    columns["responses"] = [[tokenizer.decode(r, skip_special_tokens=True) for r in rs]
                            for rs in columns["response_ids"]]
    columns["logp"] = sequence_logprobs(model, prompt_ids, columns["response_ids"], tokenizer, mesh)
    difference = np.abs(np.subtract(columns["logp"], columns["logp_vllm"]))
    return columns, {"engine": "vllm",
                     "vllm_logp_max_abs_diff": float(difference.max()) if difference.size else 0.0}


def check_engine(sampling):
    """ValueError (one line) when sampling.engine cannot run here: vLLM missing from the interpreter
    that sampling.vllm_python names (this one by default). Before anything starts."""
    if sampling.engine == "vllm":
        from nash_jax.rollout.vllm_engine import missing_vllm

        if (reason := missing_vllm(sampling.vllm_python)) is not None:
            raise ValueError(reason)


def clean_up(work_dir):
    """Remove vLLM's finished batches once the stage that used them is recorded."""
    shutil.rmtree(work_dir, ignore_errors=True)
