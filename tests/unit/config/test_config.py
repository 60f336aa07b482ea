"""Run configs: YAML + key=value overrides into typed dataclasses; errors name the file and the key."""

from pathlib import Path

import pytest
import yaml

from nash_jax.config import RunConfig, load_config, to_dict
from nash_jax.runs import RunDir

CONFIGS = Path(__file__).parents[3] / "configs"


def write(tmp_path, text, recipe="sppo"):
    path = tmp_path / "c.yaml"
    path.write_text(f"recipe: {recipe}\n{text}" if recipe else text)
    return path


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIGS.glob("*.yaml")))
def test_shipped_configs_load(name):
    config = load_config(CONFIGS / f"{name}.yaml")
    assert isinstance(config, RunConfig) and config.name == name


def test_paper_presets_carry_the_papers_settings():
    for name in ("sppo_mistral7b", "sppo_llama3_8b"):
        c = load_config(CONFIGS / f"{name}.yaml")
        assert (c.sampling.num_samples, c.sppo.eta, c.sppo.iterations) == (5, 1000.0, 3)
        assert (c.train.optimizer.learning_rate, c.train.optimizer.warmup_ratio) == (5e-7, 0.1)
        assert (c.train.optimizer.schedule, c.train.batch_size) == ("linear", 64)
        assert (c.judge.kind, c.sppo.selection, c.data.prompts_per_iteration) == (
            "pairrm", "winner_loser", 20000)


def test_overrides_set_nested_fields_and_parse_values(tmp_path):
    path = write(tmp_path, "train:\n  batch_size: 8\n")
    config = load_config(path, ["train.optimizer.learning_rate=1e-3", "sppo.iterations=2",
                                "model.remat=true", "eval.max_new_tokens=null", "run_dir=/x"])
    assert config.train.optimizer.learning_rate == 1e-3 and config.train.batch_size == 8
    assert config.sppo.iterations == 2 and config.model.remat is True
    assert config.eval.max_new_tokens is None and config.run_dir == "/x"
    assert config.name == "c"  # defaults to the file's stem


@pytest.mark.parametrize("override, message", [
    (["train.batchsize=3"], "unknown key 'train.batchsize'; expected one of ['batch_size', "),
    (["sppo.loss=kto"], "sppo.loss='kto'; expected one of ['sppo', 'sppo_hard', 'dpo', 'ipo']"),
    (["train.epochs=two"], "train.epochs='two'; expected an integer"),
    (["train.epochs=0"], "train.epochs=0; expected a value ≥ 1"),
    (["sampling.top_p=1.5"], "sampling.top_p=1.5; expected a value in (0, 1]"),
    (["train.optimizer.name=lion"], "train.optimizer.name='lion'; expected one of"),
    (["judge=3"], "judge: expected a mapping of JudgeConfig fields"),
    (["nonsense"], "expected KEY=VALUE"),
])
def test_bad_values_are_named_with_the_file_and_what_was_expected(tmp_path, override, message):
    path = write(tmp_path, "name: x\n")
    with pytest.raises(ValueError) as err:
        load_config(path, override)
    assert message in str(err.value)
    if override != ["nonsense"]:
        assert str(path) in str(err.value)


def test_unknown_key_in_the_file_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"c.yaml: unknown key 'sampling.tempreature'"):
        load_config(write(tmp_path, "sampling:\n  tempreature: 0.7\n"))


def test_missing_config_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="config file .*nope.yaml does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_a_different_config_on_an_existing_run_dir_is_refused(tmp_path):
    run = RunDir(tmp_path / "run")
    first = to_dict(load_config(write(tmp_path, "name: a\n")))
    run.lock_config(first)
    changed = to_dict(load_config(write(tmp_path, "name: a\n"), ["sppo.eta=2"]))
    run.lock_config(changed)  # nothing ran yet: a corrected config is taken
    run.lock_config(first)
    run.finish("init", [])
    run.lock_config(first)  # the same config resumes
    with pytest.raises(ValueError, match=r"different config; it differs in sppo.eta \(1000.0 there, 2.0"):
        RunDir(tmp_path / "run").lock_config(changed)
    moved = to_dict(load_config(write(tmp_path, "name: a\n"), ["run_dir=/elsewhere"]))
    RunDir(tmp_path / "run").lock_config(moved)  # where the directory is does not matter


def test_without_run_dir_the_newest_unfinished_run_of_the_same_config_resumes(tmp_path):
    from dataclasses import replace

    from nash_jax.engine import resolve_run_dir
    config = load_config(write(tmp_path, "name: a\n"))
    fresh = resolve_run_dir(config, root=tmp_path / "runs")
    assert fresh.run_dir.startswith(str(tmp_path / "runs" / "a-"))
    older, newer, other = (tmp_path / "runs" / n for n in ("a-20260101-000000", "a-20260102-000000",
                                                          "a-20260103-000000"))
    for path, c in ((older, config), (newer, config), (other, replace(config, seed=9))):
        RunDir(path).lock_config(to_dict(replace(c, run_dir=str(path))))
    assert resolve_run_dir(config, root=tmp_path / "runs").run_dir == str(newer)  # not other's seed
    RunDir(newer).finish("report", [])
    assert resolve_run_dir(config, root=tmp_path / "runs").run_dir == str(older)
    RunDir(older).finish("report", [])
    assert resolve_run_dir(config, root=tmp_path / "runs").run_dir not in (str(older), str(newer))


def test_the_recipe_is_required_and_named_from_the_registered_ones(tmp_path):
    with pytest.raises(ValueError, match=r"c.yaml: recipe: missing; expected one of \[.*'nash_md'.*'sppo'"):
        load_config(write(tmp_path, "name: x\n", recipe=None))
    with pytest.raises(ValueError, match=r"c.yaml: recipe='sppo2'; expected one of \["):
        load_config(write(tmp_path, "name: x\n", recipe="sppo2"))
    with pytest.raises(ValueError, match=r"imports: cannot import 'no_such_module_here'"):
        load_config(write(tmp_path, "imports: [no_such_module_here]\n"))


def test_a_run_saved_by_an_earlier_version_still_resumes(tmp_path):
    """A run directory's config.yaml written by an earlier version (every recipe's section in it, a
    field of its own section not yet there) reads with that field at its default and the other
    recipes' sections left out, and the same command resumes it."""
    from nash_jax.config import normalised

    config = load_config(write(tmp_path, "name: a\n"), [f"run_dir={tmp_path / 'run'}"])
    saved = {**to_dict(config), "nash_md": {"steps": 100}}
    del saved["sppo"]["iterations"]  # as if the field had been added after this run started
    run = RunDir(tmp_path / "run")
    run.lock_config(saved)
    run.lock_config(to_dict(config), normalise=normalised)
    assert normalised({"recipe": "nope"}) is None


# Issue 18's findings about config values: each refused when the config is read, naming the key.
@pytest.mark.parametrize("override, message", [
    (["train.optimizer.clip_norm=-1"], "train.optimizer.clip_norm=-1.0; expected a value > 0"),
    (["train.optimizer.clip_norm=0"], "train.optimizer.clip_norm=0.0; expected a value > 0"),
    (["sppo.eta=.inf"], "sppo.eta=inf; expected a finite number"),
    (["train.optimizer.learning_rate=.nan"], "train.optimizer.learning_rate=nan; expected a finite"),
    (["train.optimizer.learning_rate=0"], "train.optimizer.learning_rate=0.0; expected a value > 0"),
    (["eval.prompts=-3"], "eval.prompts=-3; expected a value ≥ 1"),
    (["eval.prompts=0"], "eval.prompts=0; expected a value ≥ 1"),
    (["sampling.top_p=0"], "sampling.top_p=0.0; expected a value in (0, 1]"),
    (["sampling.top_k=-1"], "sampling.top_k=-1; expected a value ≥ 0"),
    (["train.optimizer.warmup_ratio=1"], "train.optimizer.warmup_ratio=1.0; expected a value in [0, 1)"),
    (["seed=-1"], "seed=-1; expected a value in [0, 2.14748e+09]"),
    (["mesh.fsdp=0"], "mesh.fsdp=0; expected a value ≥ 1 or -1"),
    (["warm_start.hidden_size=30"], "warm_start.hidden_size=30; expected a multiple of 4"),
])
def test_values_outside_their_domain_are_refused_when_the_config_is_read(tmp_path, override, message):
    with pytest.raises(ValueError) as err:
        load_config(write(tmp_path, "name: x\n"), override)
    assert message in str(err.value) and "c.yaml" in str(err.value)


def test_a_section_given_twice_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"c.yaml: not valid YAML: .*key 'sppo' appears twice"):
        load_config(write(tmp_path, "sppo:\n  eta: 2\nsppo:\n  eta: 3\n"))


def test_sppo_with_one_sample_per_prompt_is_refused_before_the_run_directory_is_touched(tmp_path):
    from nash_jax import engine
    config = load_config(write(tmp_path, "name: x\n"),
                         ["sampling.num_samples=1", f"run_dir={tmp_path / 'run'}"])
    with pytest.raises(ValueError, match=r"sampling.num_samples=1; expected ≥ 2 for SPPO"):
        engine.run(config)
    assert not (tmp_path / "run").exists()


def test_every_path_a_run_needs_is_checked_before_its_directory_is_locked(tmp_path):
    from nash_jax import engine
    config = load_config(write(tmp_path, "name: x\n"), [
        f"run_dir={tmp_path / 'run'}", "eval.second_judge.kind=file",
        f"eval.second_judge.path={tmp_path / 'nope.jsonl'}"])
    with pytest.raises(FileNotFoundError, match=r"eval.second_judge.path=.*nope.jsonl: does not exist"):
        engine.run(config)
    assert not (tmp_path / "run").exists()


def _leaf_fields(cls, prefix=""):
    """(dotted key, type hint, owning class, field name) of every leaf field of a config type."""
    import dataclasses
    import typing
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint, key = hints[f.name], f"{prefix}{f.name}"
        options = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        if dataclasses.is_dataclass(options[0]):
            yield from _leaf_fields(options[0], key + ".")
        else:
            yield key, hint, cls, f.name


def _wrong_values(hint, cls, name):
    """Values the field must refuse: other types, and numbers outside its domain."""
    import math
    import typing
    options = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    kind = options[0]
    wrong = [{"a": 1}, [1, [2]]] if kind is not list and typing.get_origin(kind) is not list else [3]
    if typing.get_origin(kind) is typing.Literal:
        return wrong + ["no-such-choice"]
    if kind is bool:
        return wrong + ["maybe", 2]
    if kind is int:
        wrong += ["x", 1.5, True]
    if kind is float:
        wrong += ["x", math.inf, -math.inf, math.nan, True]
    domain = getattr(cls, "DOMAINS", {}).get(name)
    if domain is not None and kind in (int, float):
        if domain.low is not None:
            wrong.append(domain.low - 1 if kind is int or not domain.low_open else domain.low)
        if domain.high is not None:
            wrong.append(domain.high + 1 if kind is int or domain.high_open is False else domain.high)
    return wrong


def test_every_config_field_refuses_wrong_values_naming_its_key(tmp_path):
    """A property over the whole config: every leaf field, every kind of wrong value."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from nash_jax.config import run_config_type
    from nash_jax.config.recipes import section_owner

    cases = [(key, value) for key, hint, cls, name in _leaf_fields(run_config_type())
             for value in _wrong_values(hint, cls, name) if key not in ("name", "run_dir")]
    assert len(cases) > 100, len(cases)
    path = write(tmp_path, "name: x\n")

    @settings(max_examples=150, deadline=None, derandomize=True)
    @given(st.sampled_from(cases))
    def refused(case):
        import yaml as yaml_lib
        key, value = case
        owner = section_owner(key.split(".")[0])  # a recipe's field, on a config of that recipe
        with pytest.raises(ValueError) as err:
            load_config(path, [f"{key}={yaml_lib.safe_dump(value, default_flow_style=True).strip()}"
                               .replace("\n...", ""), *([f"recipe={owner}"] if owner else [])])
        assert key in str(err.value), (key, value, str(err.value))

    refused()


# Issue 44: a config holds what its recipe reads, and nothing that no one reads.
def test_another_recipes_section_is_refused_by_name(tmp_path):
    path = write(tmp_path, "name: a\ngrpo:\n  steps: 4\n")
    with pytest.raises(ValueError, match="section 'grpo' is recipe grpo's; this config runs recipe sppo, "
                                         "whose section is 'sppo': remove it, or set recipe: grpo"):
        load_config(path)


@pytest.mark.parametrize("config, override, message", [
    ("kuhn_demo", "judge.kind=pairrm", "judge.kind='pairrm': recipe game_selfplay does not read it "
                                       r"\(of judge.\* it reads none of them\)"),
    ("kuhn_demo", "eval.prompts=8", "eval.prompts=8: recipe game_selfplay does not read it"),
    ("proposer_solver_demo", "sampling.max_new_tokens=9", "sampling.max_new_tokens=9: recipe "
                                                          "proposer_solver does not read it"),
    ("nash_md_demo", "train.batch_size=16", "train.batch_size=16: recipe nash_md does not read it"),
    ("ssr_demo", "data.system_prompt=hi", "data.system_prompt='hi': recipe ssr does not read it"),
])
def test_a_shared_field_the_recipe_does_not_read_is_refused(config, override, message):
    with pytest.raises(ValueError, match=message):
        load_config(CONFIGS / f"{config}.yaml", [override])


def test_train_epochs_is_read_by_the_online_recipes():
    """`train.epochs` on a game run is honoured (updates per step: the learner's), not ignored."""
    assert load_config(CONFIGS / "kuhn_demo.yaml", ["train.epochs=4"]).train.epochs == 4


@pytest.mark.parametrize("override, message", [
    ("grpo.epochs_per_batch=2", "grpo.epochs_per_batch is now train.epochs: set that instead"),
])
def test_a_renamed_field_says_its_new_name(override, message):
    with pytest.raises(ValueError, match=message):
        load_config(CONFIGS / "grpo_demo.yaml", [override])


def test_the_former_name_of_ssr_still_runs_with_a_note(tmp_path):
    from nash_jax.config.recipes import RenamedRecipe

    values = yaml.safe_load((CONFIGS / "ssr_demo.yaml").read_text())
    values["recipe"], values["bug_injection"] = "bug_injection", values.pop("ssr")
    values["model"]["path"] = "builtin:bug_injection"
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(values))
    with pytest.warns(RenamedRecipe, match="recipe: bug_injection is now recipe: ssr"):
        config = load_config(path)
    assert config.recipe == "ssr" and config == load_config(CONFIGS / "ssr_demo.yaml", [
        "model.path=builtin:bug_injection"])


def test_plan_refuses_a_recipe_without_a_step_to_plan(tmp_path):
    from nash_jax.engine import Recipe, planning, register
    from nash_jax.engine.registry import RECIPES

    register(Recipe(name="no_plan", run=lambda config, run: {}))
    try:
        config = load_config(write(tmp_path, "name: a\n", recipe="no_plan"))
        with pytest.raises(ValueError, match="recipe no_plan gives no plan_step"):
            planning.plan_inputs(config)
    finally:
        from nash_jax.config import recipes as config_recipes
        RECIPES.pop("no_plan")
        config_recipes._RECIPES.pop("no_plan")
        config_recipes.run_config_type.cache_clear()


def test_a_built_in_prompt_sets_count_is_part_of_its_path():
    from nash_jax.tasks import builtin_prompt_set

    assert builtin_prompt_set("builtin:synthetic") == ("builtin:synthetic", 1024)
    assert builtin_prompt_set("builtin:arithmetic:352") == ("builtin:arithmetic", 352)
    assert builtin_prompt_set("prompts.jsonl") is None and builtin_prompt_set("data/a:b:7") is None
    for bad in ("builtin:arithmetic:0", "builtin:arithmetic:many", "builtin:arithmetic:",
                "builtin:arithmetic:0352", "builtin:arithmetic:\u00b2"):
        with pytest.raises(ValueError, match=r"is not a count of prompts; expected builtin:arithmetic "
                                             r"\(1024 prompts\) or builtin:arithmetic:N with N ≥ 1"):
            builtin_prompt_set(bad)
    # a prompt file of one's own replaces the built-in set and its count: nothing is left unread
    config = load_config(CONFIGS / "smollm2_sppo.yaml", ["data.path=prompts.jsonl"])
    assert config.data.path == "prompts.jsonl" and "builtin_prompts" not in to_dict(config)["data"]


def test_the_former_data_builtin_prompts_moves_into_the_path_or_is_refused(tmp_path):
    from nash_jax.config.loader import MovedField

    values = yaml.safe_load((CONFIGS / "smollm2_sppo.yaml").read_text())
    values["data"] = {**values["data"], "path": "builtin:arithmetic", "builtin_prompts": 352}
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(values))
    with pytest.warns(MovedField, match="data.builtin_prompts=352 is now part of data.path: "
                                        "data.path=builtin:arithmetic:352"):
        assert load_config(old) == load_config(CONFIGS / "smollm2_sppo.yaml")
    with pytest.raises(ValueError, match=r"data.builtin_prompts=352: nothing reads it with "
                                         r"data.path=prompts.jsonl \(a prompt set of your own\); leave it unset"):
        load_config(old, ["data.path=prompts.jsonl"])
    with pytest.raises(ValueError, match="set data.path=builtin:arithmetic:352 instead"):
        load_config(old, ["data.path=builtin:arithmetic:24"])


@pytest.mark.parametrize("path, count", [("prompts.jsonl", 352), ("builtin:arithmetic", 1024),
                                         ("builtin:arithmetic", 352), ("builtin:arithmetic:24", 1024)])
def test_a_run_directorys_config_of_before_still_reads_and_matches(path, count, recwarn):
    """Every field was saved, builtin_prompts too, whatever data.path was (the quickstart's
    data.path=prompts.jsonl over smollm2_sppo.yaml saved 352): such a run still resumes and reports."""
    from nash_jax.config import build_run_config, normalised

    today = to_dict(load_config(CONFIGS / "smollm2_sppo.yaml", [f"data.path={path}"]))
    before = {**today, "data": {**today["data"], "builtin_prompts": count}}
    if path == "builtin:arithmetic" and count != 1024:  # the count lived in its own field then
        before["data"]["path"], today["data"]["path"] = path, f"{path}:{count}"
    assert normalised(before) == normalised(today) is not None
    assert to_dict(build_run_config(before, saved=True)) == today
    assert not [w for w in recwarn if "builtin_prompts" in str(w.message)]
