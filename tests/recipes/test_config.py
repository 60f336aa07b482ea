"""Run configs: YAML + key=value overrides into typed dataclasses; errors name the file and the key."""

from pathlib import Path

import pytest

from nash_jax.config import RunConfig, load_config, to_dict
from nash_jax.runs import RunDir

CONFIGS = Path(__file__).parents[2] / "configs"


def write(tmp_path, text, recipe="sppo"):
    path = tmp_path / "c.yaml"
    path.write_text(f"recipe: {recipe}\n{text}" if recipe else text)
    return path


@pytest.mark.parametrize("name", ["demo", "nash_md_demo", "sppo_mistral7b", "sppo_llama3_8b"])
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
    (["train.epochs=0"], "train.epochs=0; expected a positive number"),
    (["sampling.top_p=1.5"], "sampling.top_p=1.5; expected a value in [0, 1]"),
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
    run.lock_config(first)  # the same config resumes
    changed = to_dict(load_config(write(tmp_path, "name: a\n"), ["sppo.eta=2"]))
    with pytest.raises(ValueError, match=r"different config; it differs in sppo.eta \(1000.0 there, 2.0"):
        RunDir(tmp_path / "run").lock_config(changed)


def test_without_run_dir_the_newest_unfinished_run_of_the_same_config_resumes(tmp_path):
    from dataclasses import replace

    from nash_jax.recipes import resolve_run_dir

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


def test_a_run_saved_before_a_section_existed_still_resumes(tmp_path):
    """A run directory's config.yaml written before a recipe (and its section) was added reads with
    that section at its defaults, and the same command resumes it."""
    from nash_jax.config import normalised

    config = load_config(write(tmp_path, "name: a\n"), [f"run_dir={tmp_path / 'run'}"])
    saved = to_dict(config)
    del saved["nash_md"]  # as if nash_md had been registered after this run started
    run = RunDir(tmp_path / "run")
    run.lock_config(saved)
    run.lock_config(to_dict(config), normalise=normalised)
    assert normalised({"recipe": "nope"}) is None
