"""Tasks shipped with the package: data, a tokenizer and a preference oracle that need no downloads.

BUILTIN_PROMPTS names the prompt sets a config may give as `data.path` (each drawn with
`data.builtin_prompts` prompts and the run's seed); the modules are imported only when a run uses them.
"""

import importlib

# data.path -> (module, its prompt_texts(n, seed) function)
BUILTIN_PROMPTS = {
    "builtin:synthetic": ("nash_jax.tasks.synthetic.synthetic", "prompt_texts"),
    "builtin:arithmetic": ("nash_jax.tasks.arithmetic.arithmetic_questions", "prompt_texts"),
}


def builtin_prompt_texts(name, n, seed):
    """The n prompts of the built-in prompt set `name` (a BUILTIN_PROMPTS key) drawn by `seed`."""
    module, function = BUILTIN_PROMPTS[name]
    return getattr(importlib.import_module(module), function)(n, seed=seed)
