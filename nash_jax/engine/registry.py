"""Recipes by name. A recipe is a package that registers itself:

    register(Recipe(name="mine", run=run_mine, section="mine", section_type=MineConfig))

after which `recipe: mine` (with a `mine:` config section) runs through `nash-jax run`. The built-in
recipes are listed as entry points of the `nash_jax.recipes` group in pyproject.toml, as an installed
package of your own can list its recipes; a config's `imports:` names further modules to import.
"""

import dataclasses
from dataclasses import dataclass
from typing import Callable

from nash_jax import config as config_lib


@dataclass(frozen=True)
class Recipe:
    name: str
    run: Callable  # run(config, run_dir: RunDir) -> the report dict; runs (or resumes) every stage
    section: str | None = None  # the recipe's own config section
    section_type: type | None = None  # its dataclass
    check: Callable | None = None  # check(config): relations between fields, before anything starts
    summary: Callable | None = None  # summary(report dict) -> lines `nash-jax run` prints at the end;
    #                                  default: report.summary_lines (the cross-iterate win rates)
    # the built-in models (tasks.registry) whose warm start the recipe makes
    builtin_models: tuple = (config_lib.BUILTIN_SYNTHETIC,)
    plan_step: Callable | None = None  # plan_step(config) -> plan.StepShape of one update (what
    #                                    `nash-jax plan` sizes); None: plan refuses it
    # batch_sizes(config) -> {what (config keys): examples per step} that must split into
    # train.micro_batches over the mesh's data × fsdp devices; `run` and `plan` both check them
    batch_sizes: Callable = lambda config: {}
    # the report-only eval fields (config.REPORT_ONLY_EVAL_FIELDS) its report reads: `nash-jax rerank`
    # needs best_of_n, `nash-jax average` average_iterates (and the iterate_dirs such a report lists)
    report_options: tuple = config_lib.REPORT_ONLY_EVAL_FIELDS
    # {shared section: the fields of it the recipe reads} for the sections it reads only in part
    # (e.g. ONLINE_READS); a config that sets another field of such a section is refused by name
    reads: dict = dataclasses.field(default_factory=dict)
    formerly: str | None = None  # its name before a rename (`recipe:` still takes it, with a note)
    fits_model_dirs: bool = False  # whether warm_start.fit_model applies (it has demonstrations to fit)
    # {"section.field": why the recipe cannot use it}: the reason a refused unread field is refused
    refusals: dict = dataclasses.field(default_factory=dict)


# what every online recipe reads of `train` (the learner's fields: no train.batch_size, a step's
# batch is the recipe's own), and what a self-play recipe reads besides: the sampler's settings and
# the prompt limit; no judge, no eval section (its anchors are its own)
ONLINE_TRAIN = {"micro_batches", "epochs", "checkpoint_every", "max_skipped_fraction", "logprob_chunk",
                "optimizer"}
# sampling.num_samples is K of SPPO's generate stage; an online recipe sets its own per step
ONLINE_SAMPLING = {"max_new_tokens", "temperature", "top_p", "top_k", "prompts_per_batch"}
# sampling.engine: vllm samples a fixed, exported policy (rollout/engines.py); what an online recipe
# says when a config asks it for vLLM
ONLINE_VLLM = ("vLLM samples only a fixed, exported policy (SPPO's generate stage, the evaluation); "
               "this recipe's policy changes every step, and weight sync to vLLM is not built")
ONLINE_REFUSALS = {"sampling.engine": ONLINE_VLLM, "sampling.vllm_python": ONLINE_VLLM}
SELF_PLAY_READS = {"train": ONLINE_TRAIN, "judge": set(), "eval": set(),
                   "data": {"max_prompt_tokens"}, "sampling": {"temperature", "top_p", "top_k"}}


RECIPES = {}


def register(recipe):
    """Make `recipe` runnable by name; returns it."""
    known = RECIPES.get(recipe.name)
    if known is not None and known.run is not recipe.run:
        raise ValueError(f"a recipe named {recipe.name!r} is already registered (by "
                         f"{known.run.__module__}); choose another name")
    config_lib.register_recipe(recipe.name, recipe.section, recipe.section_type, recipe.reads,
                               recipe.formerly, recipe.refusals)
    RECIPES[recipe.name] = recipe
    return recipe


def get(name):
    config_lib.discover_recipes()
    if name not in RECIPES:
        raise ValueError(f"recipe {name!r} is not one of {sorted(RECIPES)}")
    return RECIPES[name]


def check_report_option(config, field, what):
    """ValueError unless the report of `config`'s recipe reads eval.`field`; `what` (a command, an
    override) is what does not apply."""
    recipe = get(config.recipe)
    if field not in recipe.report_options:
        others = sorted(name for name, r in RECIPES.items() if field in r.report_options)
        raise ValueError(f"{what} does not apply to a {recipe.name} run (its report reads no "
                         f"eval.{field}); it applies to runs of {others}")


def summary_lines(config, report):
    """What `nash-jax run` prints when the recipe `config` names has finished with `report`."""
    recipe = get(config.recipe)
    if recipe.summary is not None:
        return recipe.summary(report)
    from nash_jax.reporting import summary_lines as default
    return default(report)
