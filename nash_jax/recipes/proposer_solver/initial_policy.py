"""π_0 for `model.path: builtin:proposer_solver`: the warm start, a tiny Llama fit to demonstrations
of both roles (stage `init`)."""

import numpy as np

from nash_jax import data
from nash_jax.engine import preparation
from nash_jax.recipes.proposer_solver.task import heldout_texts
from nash_jax.runs.keys import stage_seed
from nash_jax.selfplay import answer_sources
from nash_jax.tasks.arithmetic import arithmetic, vocabulary
from nash_jax.tasks.documents import documents


def warm_start(config, run, tokenizer, mesh, task):
    """Fit a tiny Llama to demonstrations of both roles and export it as π_0 (stage `init`)."""
    if run.done("init"):
        return
    w, ps = config.warm_start, config.proposer_solver
    model = preparation.tiny_llama(config, tokenizer)
    rng = np.random.default_rng(stage_seed(config.seed, 0, "warm_start"))
    held = heldout_texts(task)
    task_rules = answer_sources.task_class(ps.task.name)()
    kind = task_rules.kind
    prompts, responses = [], []
    for i in range(w.steps * w.batch_size):
        if i % 2 == 0:  # a proposer demonstration
            source = task.sources[rng.integers(len(task.sources))]
            if kind == "document":
                response = documents.demonstration(source.text, rng)
            elif rng.random() < 0.05:
                response = arithmetic.malformed_problem(rng)
            else:
                response = arithmetic.random_problem(rng)[0]
                while response in held:
                    response = arithmetic.random_problem(rng)[0]
            prompts.append(task_rules.proposer_prompt(source))
        else:  # a solver demonstration, never on a held-out problem
            if kind == "document":
                problem, answer = task.train_problems[rng.integers(len(task.train_problems))]
            else:
                problem, answer = arithmetic.random_problem(rng)
                while problem in held:
                    problem, answer = arithmetic.random_problem(rng)
            prompts.append(task_rules.solver_prompt(problem))
            sloppy = kind == "seed" and rng.random() < ps.task.teacher_off_by_one
            response = str(answer + 1 if sloppy else answer)
        responses.append(response)
    ids, _, _ = data.encode_prompts(tokenizer, prompts, max_tokens=config.data.max_prompt_tokens,
                                    too_long="truncate_left", where="warm-start prompts")
    preparation.fit_demonstrations(config, run, model, list(zip(ids, responses)), tokenizer,
                                   vocabulary.TOKENIZER_DIR, mesh)
