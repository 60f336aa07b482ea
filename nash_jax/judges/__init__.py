"""Judges: PreferenceModel / RewardModel (base.py), PairRM, the LLM judge, HF reward models, judges by
import path, and `make_judge`, the one builder from a JudgeConfig.

Each kind has a check (run by `check_judge` before anything starts: paths, families, templates,
imports) and a builder, in two tables keyed by `judge.kind`; config.JudgeConfig.READS, the third
table, lists the fields each kind reads (the others must stay at their defaults). Builders import their module when called,
so that importing this package loads no model code.
"""

from pathlib import Path


def make_judge(judge_config, mesh=None, key="judge"):
    """The PreferenceModel a JudgeConfig names, on `mesh` where it runs a model (one device without);
    errors name `key` (judge, eval.second_judge)."""
    check_judge(judge_config, key)
    return BUILDERS[judge_config.kind](judge_config, mesh, key)


def gives_rewards(judge_config):
    """Whether the judge a JudgeConfig names scores each response with a scalar reward (a reward model,
    a python function with returns: rewards): its judge is a RewardJudge, whose `rewards` an online
    recipe can train on. The other kinds give only preferences."""
    return judge_config.kind == "reward_model" or (judge_config.kind == "python"
                                                   and judge_config.returns == "rewards")


def check_judge(judge_config, key="judge"):
    """What can be checked of a judge before anything runs (FileNotFoundError or ValueError naming
    `key`, the value and what was expected)."""
    judge_config.check_fields(key)
    CHECKS[judge_config.kind](judge_config, key)


# ---------------------------------------------------------------------------------------------------
# checks

def _no_check(judge_config, key):
    return None


def _existing_path(judge_config, key, what):
    path = judge_config.path
    if path is None or not Path(path).exists():
        raise FileNotFoundError(f"{key}.path={path}: does not exist; the {judge_config.kind} judge "
                                f"needs a local {what}")
    return Path(path)


def _check_file(judge_config, key):
    _existing_path(judge_config, key, "file")


def _check_pairrm(judge_config, key):
    from nash_jax.models import deberta
    from nash_jax.models.hf import read_config

    path = _existing_path(judge_config, key, "PairRM directory")
    deberta.config_from_hf(read_config(path), source=str(path / "config.json"))


def _check_decoder(judge_config, key):
    """A decoder directory of a family nash_jax loads (the LLM judge, the reward model)."""
    from nash_jax.models import hf

    path = _existing_path(judge_config, key, "Hugging Face model directory")
    hf.config_from_hf(hf.read_config(path), dtype=judge_config.dtype, source=str(path / "config.json"))


def _check_llm(judge_config, key):
    from nash_jax.judges.llm import DEFAULT_TEMPLATE, check_template

    _check_decoder(judge_config, key)
    check_template(judge_config.template or DEFAULT_TEMPLATE, f"{key}.template")


def _check_python(judge_config, key):
    from nash_jax.judges.simple import import_function

    import_function(judge_config.function, f"{key}.function")


CHECKS = {"synthetic": _no_check, "file": _check_file, "pairrm": _check_pairrm, "llm": _check_llm,
          "reward_model": _check_decoder, "python": _check_python}


# ---------------------------------------------------------------------------------------------------
# builders

def _synthetic(judge_config, mesh, key):
    from nash_jax.tasks.synthetic import synthetic

    return synthetic.SyntheticOracle()


def _file(judge_config, mesh, key):
    from nash_jax.judges.simple import FileJudge

    return FileJudge(judge_config.path)


def _pairrm(judge_config, mesh, key):
    from nash_jax.judges.pairrm import PairRM

    return PairRM.from_pretrained(judge_config.path, mesh=mesh, batch_size=judge_config.batch_size,
                                  mode=judge_config.mode)


def _llm(judge_config, mesh, key):
    from nash_jax.judges.llm import DEFAULT_TEMPLATE, LLMJudge

    return LLMJudge.from_pretrained(
        judge_config.path, mesh=mesh, dtype=judge_config.dtype,
        template=judge_config.template or DEFAULT_TEMPLATE, labels=tuple(judge_config.labels),
        max_tokens=judge_config.max_tokens, batch_size=judge_config.batch_size)


def _reward_model(judge_config, mesh, key):
    from nash_jax.judges.reward_model import HFRewardModel
    from nash_jax.judges.simple import RewardJudge

    return RewardJudge(HFRewardModel.from_pretrained(
        judge_config.path, mesh=mesh, dtype=judge_config.dtype, max_tokens=judge_config.max_tokens,
        batch_size=judge_config.batch_size))


def _python(judge_config, mesh, key):
    from nash_jax.judges.simple import FunctionJudge, RewardJudge, import_function

    function = import_function(judge_config.function, f"{key}.function")
    name = f"{key}.function={judge_config.function!r}"
    return (RewardJudge(function, name) if judge_config.returns == "rewards"
            else FunctionJudge(function, name))


BUILDERS = {"synthetic": _synthetic, "file": _file, "pairrm": _pairrm, "llm": _llm,
            "reward_model": _reward_model, "python": _python}
