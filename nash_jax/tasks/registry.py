"""The one registry of the built-in tasks: every caller (check_paths, `nash-jax plan`, the warm starts,
the recipes, the task modules for their own tokenizers) asks these tables.

MODELS: `model.path` values that name a tiny Llama warm-started on a task's demonstrations (the run's
stage `init`, sized by the `warm_start` section; its shape is `tiny_llama_values`) instead of a directory
on disk. A recipe lists the names it can warm-start (`Recipe.builtin_models`).

    builtin:synthetic        the synthetic task's styled answers (SPPO, Nash-MD), its own tokenizer
    builtin:proposer_solver  both roles of the proposer–solver tasks (arithmetic, documents)
    builtin:game             near-uniform legal moves of the OpenSpiel games, the games' word tokenizer
    builtin:ssr              both SSR roles (bug artifacts, repairs) of the mutation engine, a byte BPE
                             (also named builtin:bug_injection, its name before the recipe was renamed)

BUILTIN_PROMPTS: the prompt sets a config may give as `data.path`, drawn with the run's seed:
`builtin:synthetic` draws BUILTIN_PROMPT_COUNT prompts, `builtin:synthetic:352` draws 352 (the count is
part of the path, so that a `data.path` of one's own leaves no count behind that nothing reads).

PROPOSER_SOLVER_TASKS: the tasks `proposer_solver.task.name` may name, registered with
selfplay.answer_sources when this module loads.

Modules of the task families are imported only when a run uses them.
"""

import importlib
import re
from dataclasses import dataclass
from pathlib import Path

from nash_jax.selfplay import answer_sources

HERE = Path(__file__).parent


def tiny_llama_values(vocab_size, hidden_size, num_layers):
    """The HF config.json values (model_type llama) of a built-in model's tiny Llama: 4 heads over
    2 KV heads, an MLP twice as wide as the model."""
    return dict(model_type="llama", vocab_size=vocab_size, hidden_size=hidden_size,
                intermediate_size=2 * hidden_size, num_hidden_layers=num_layers, num_attention_heads=4,
                num_key_value_heads=2, head_dim=hidden_size // 4)


@dataclass(frozen=True)
class BuiltinModel:
    name: str  # the model.path value
    tokenizer_dir: Path  # the tokenizer its warm start is made for
    fitted_to: str  # what the warm start imitates, in words (for messages)


MODELS = {m.name: m for m in (
    BuiltinModel("builtin:synthetic", HERE / "synthetic" / "synthetic_tokenizer",
                 "the synthetic task's demonstrations"),
    BuiltinModel("builtin:proposer_solver", HERE / "arithmetic" / "proposer_solver_tokenizer",
                 "demonstrations of both proposer–solver roles"),
    BuiltinModel("builtin:game", HERE / "games" / "games_tokenizer",
                 "near-uniform legal moves of the configured games"),
    BuiltinModel("builtin:ssr", HERE / "code" / "ssr_tokenizer",
                 "the mutation engine's bug artifacts and repairs of the training repositories"),
)}
MODELS["builtin:bug_injection"] = MODELS["builtin:ssr"]  # SSR's name before the recipe's rename


def get(path):
    """The built-in model `path` names, or None for a directory."""
    return MODELS.get(path)


def initial_dir(path, run):
    """π_0's HF directory for model.path=`path`: the run's warm start for a built-in model, else None."""
    return run / "init" / "policy" if path in MODELS else None


# data.path -> (module, its prompt_texts(n, seed) function)
BUILTIN_PROMPTS = {
    "builtin:synthetic": ("nash_jax.tasks.synthetic.synthetic", "prompt_texts"),
    "builtin:arithmetic": ("nash_jax.tasks.arithmetic.arithmetic_questions", "prompt_texts"),
}


BUILTIN_PROMPT_COUNT = 1024  # prompts a built-in set draws when data.path gives no count


def builtin_prompt_set(path):
    """(name, count) of data.path=`path` when it names a built-in prompt set (`builtin:NAME` or
    `builtin:NAME:COUNT`), else None; ValueError for a built-in name with a count that is not one."""
    from nash_jax.config import builtin_path_parts

    name, count = builtin_path_parts(path) or (None, None)
    if name not in BUILTIN_PROMPTS:
        return None
    if count is None:
        return name, BUILTIN_PROMPT_COUNT
    if not re.fullmatch(r"[1-9][0-9]*", count):
        raise ValueError(f"data.path={path}: {count!r} is not a count of prompts; expected {name} "
                         f"({BUILTIN_PROMPT_COUNT} prompts) or {name}:N with N ≥ 1")
    return name, int(count)


def builtin_prompt_texts(path, seed):
    """The prompts of the built-in prompt set data.path=`path` names, drawn by `seed`."""
    name, count = builtin_prompt_set(path)
    module, function = BUILTIN_PROMPTS[name]
    return getattr(importlib.import_module(module), function)(count, seed=seed)


# proposer_solver.task.name -> its class, "module:Class" (imported when a run names it)
PROPOSER_SOLVER_TASKS = {
    "arithmetic": "nash_jax.tasks.arithmetic.arithmetic:ArithmeticTask",
    "document": "nash_jax.tasks.documents.documents:DocumentTask",
    "arithmetic_chat": "nash_jax.tasks.arithmetic.arithmetic_chat:ArithmeticChatTask",
}
for _name, _entry in PROPOSER_SOLVER_TASKS.items():
    answer_sources.register_task(_name, _entry)
