"""Tasks shipped with the package, one sub-package per family (synthetic, arithmetic, documents, games,
code), each with its data, tokenizer, prompts, demonstrations and oracles or verifiers, none needing a
download. `registry` is the one table of them: the built-in models, the built-in prompt sets
(BUILTIN_PROMPTS, `builtin_prompt_texts`, named here too) and the proposer–solver tasks, which it
registers with nash_jax.selfplay on import. A family's modules load only when a run uses them."""

from nash_jax.tasks.registry import BUILTIN_PROMPTS, builtin_prompt_set, builtin_prompt_texts  # noqa: F401
