"""Built-in models: `model.path` values that name a tiny Llama warm-started on a task's demonstrations
(the run's stage `init`, sized by the `warm_start` section) instead of a directory on disk. This one
table says what each name means; `check_paths`, `nash-jax plan` and every recipe ask it, and a recipe
lists the names it can warm-start (`Recipe.builtin_models`).

    builtin:synthetic        the synthetic task's styled answers (SPPO, Nash-MD), its own tokenizer
    builtin:proposer_solver  both roles of the proposer–solver tasks (arithmetic, documents)
    builtin:game             near-uniform legal moves of the OpenSpiel games, the games' word tokenizer
    builtin:bug_injection    both SSR roles (bug artifacts, repairs) of the mutation engine, a byte BPE
"""

from dataclasses import dataclass
from pathlib import Path

from nash_jax.tasks.arithmetic import vocabulary
from nash_jax.tasks.code import ssr_prompts
from nash_jax.tasks.games import games
from nash_jax.tasks.synthetic import synthetic


@dataclass(frozen=True)
class BuiltinModel:
    name: str  # the model.path value
    tokenizer_dir: Path  # the tokenizer its warm start is made for
    fitted_to: str  # what the warm start imitates, in words (for messages)


MODELS = {m.name: m for m in (
    BuiltinModel("builtin:synthetic", synthetic.TOKENIZER_DIR, "the synthetic task's demonstrations"),
    BuiltinModel("builtin:proposer_solver", vocabulary.TOKENIZER_DIR,
                 "demonstrations of both proposer–solver roles"),
    BuiltinModel("builtin:game", games.TOKENIZER_DIR, "near-uniform legal moves of the configured games"),
    BuiltinModel("builtin:bug_injection", ssr_prompts.TOKENIZER_DIR,
                 "the mutation engine's bug artifacts and repairs of the training repositories"),
)}


def get(path):
    """The built-in model `path` names, or None for a directory."""
    return MODELS.get(path)


def initial_dir(path, run):
    """π_0's HF directory for model.path=`path`: the run's warm start for a built-in model, else None."""
    return run / "init" / "policy" if path in MODELS else None
