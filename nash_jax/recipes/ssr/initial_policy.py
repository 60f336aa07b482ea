"""π_0's warm start (stage `init`): a model fit to the mutation engine's demonstrations of both roles,
the artifact an injector writes for a training repository and the repair (the reversed bug patch) a
solver writes for it. For `model.path: builtin:ssr` a tiny Llama from scratch; for a model directory
with `warm_start.fit_model` the model itself (supervised fine-tuning through the same step factory),
so that self-play starts from a policy that has seen the answer formats."""

import numpy as np

from nash_jax import data
from nash_jax.engine import policy_files, preparation
from nash_jax.recipes.ssr.game import solver_prompt
from nash_jax.runs.keys import stage_seed
from nash_jax.tasks.code import ssr_prompts
from nash_jax.tasks.code.ssr_artifact import policy_text


def warm_start(config, run, tokenizer, mesh, task):
    """Fit π_0 to demonstrations of both roles and export it (stage `init`): a tiny Llama for the
    built-in model, model.path itself with warm_start.fit_model."""
    if run.done("init"):
        return
    w, b = config.warm_start, config.ssr
    pairs = []
    for bug in task.demonstrations:
        pairs.append((ssr_prompts.injector_prompt(bug.repository.entry, bug.repository.root),
                      policy_text(bug.artifact), b.injector_max_tokens))
        pairs.append((solver_prompt(bug.artifact, bug.repository), bug.repair_diff, b.solver_max_tokens))
    # a response longer than its role's max tokens (EOS included) is one the policy could never write
    pairs = [(p, r) for p, r, most in pairs if len(tokenizer(r, add_special_tokens=False)["input_ids"]) < most]
    if not pairs:
        raise ValueError(f"ssr: none of the {len(task.demonstrations)} demonstrations fits "
                         f"injector_max_tokens={b.injector_max_tokens} / solver_max_tokens="
                         f"{b.solver_max_tokens}; raise them")
    ids, _, _ = data.encode_prompts(tokenizer, [prompt for prompt, _ in pairs],
                                    max_tokens=config.data.max_prompt_tokens, too_long="truncate_left",
                                    where="warm-start prompts")
    rng = np.random.default_rng(stage_seed(config.seed, 0, "warm_start"))
    order = rng.integers(len(pairs), size=w.steps * w.batch_size)  # drawn with replacement
    examples = [(ids[i], pairs[i][1]) for i in order]
    if preparation.is_builtin(config):
        preparation.fit_demonstrations(config, run, preparation.tiny_llama(config, tokenizer), examples,
                                       tokenizer, ssr_prompts.TOKENIZER_DIR, mesh)
        return
    t = config.train
    model = policy_files.load_policy(config.model.path, config.model, mesh)
    preparation.fit_demonstrations(config, run, model, examples, tokenizer,
                                   policy_files.tokenizer_source(config.model, run), mesh,
                                   micro_batches=t.micro_batches, logprob_chunk=t.logprob_chunk)
