"""π_0 for `model.path: builtin:ssr`: the warm start, a tiny Llama fit to the mutation
engine's demonstrations of both roles (stage `init`): the artifact an injector writes for a training
repository, and the repair (the reversed bug patch) a solver writes for it."""

import numpy as np

from nash_jax import data
from nash_jax.engine import preparation
from nash_jax.recipes.ssr.game import solver_prompt
from nash_jax.runs.keys import stage_seed
from nash_jax.tasks.code import ssr_prompts
from nash_jax.tasks.code.ssr_artifact import policy_text


def warm_start(config, run, tokenizer, mesh, task):
    """Fit a tiny Llama to demonstrations of both roles and export it as π_0 (stage `init`)."""
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
    preparation.fit_demonstrations(config, run, preparation.tiny_llama(config, tokenizer),
                                   [(ids[i], pairs[i][1]) for i in order], tokenizer,
                                   ssr_prompts.TOKENIZER_DIR, mesh)
