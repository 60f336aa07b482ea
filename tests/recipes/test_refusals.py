"""A run that is refused stops before any work and leaves no run folder; every prompt's length is
checked before the warm start; a user's judge that raises is shown with its own frames and one line
naming it, the iteration and the stage; repeated prompts never reach both splits."""

import json

import pytest

from nash_jax import engine
from nash_jax.cli import main
from nash_jax.config import load_config
from tests.recipes.conftest import CONFIGS, small_config

PROMPTS = [f"write a reply about topic number {i}" for i in range(60)]


def prompt_file(path, texts):
    path.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in texts))
    return path


def test_a_too_long_prompt_is_refused_before_the_warm_start_and_leaves_no_run_folder(tmp_path):
    """The long prompt sits in iteration 1's block, which the run used to reach only after iteration 0
    had been sampled, judged and trained; now the refusal comes first, and the run can be fixed and
    rerun."""
    prompts = prompt_file(tmp_path / "p.jsonl", PROMPTS[:40] + ["word " * 20_000] + PROMPTS[40:])
    config = load_config(small_config(tmp_path), [f"data.path={prompts}", "data.too_long=error",
                                                   "data.shuffle=false", "eval.prompts=8",
                                                   f"run_dir={tmp_path / 'run'}"])
    with pytest.raises(ValueError, match=r"iteration 1's prompt split: prompt \d+ has \d+ tokens after "
                                         r"the chat template; data.max_prompt_tokens="):
        engine.run(config)
    assert not (tmp_path / "run").exists()


def test_a_refused_run_leaves_an_empty_folder_as_it_found_it(tmp_path):
    (tmp_path / "p.jsonl").write_text(json.dumps({"text": "no prompt column"}) + "\n")
    (tmp_path / "run").mkdir()
    config = load_config(small_config(tmp_path), [f"data.path={tmp_path / 'p.jsonl'}",
                                                   f"run_dir={tmp_path / 'run'}"])
    with pytest.raises(ValueError, match=r"data.prompt_column='prompt' is not one"):
        engine.run(config)
    assert (tmp_path / "run").is_dir() and not any((tmp_path / "run").iterdir())


def test_a_game_prompt_over_the_limit_is_refused_before_the_warm_start(tmp_path):
    config = load_config(CONFIGS / "kuhn_demo.yaml", ["data.max_prompt_tokens=6",
                                                      f"run_dir={tmp_path / 'run'}"])
    with pytest.raises(ValueError, match=r"kuhn_poker: the prompt at state .* over data.max_prompt_tokens=6"):
        engine.run(config)
    assert not (tmp_path / "run").exists()


def test_a_users_judge_that_raises_shows_its_frames_and_names_the_judge_iteration_and_stage(tmp_path, capsys):
    prompts = prompt_file(tmp_path / "p.jsonl", PROMPTS + PROMPTS[:20])  # 20 repeated
    config = small_config(tmp_path, judge={"kind": "python", "function": "tests.recipes.verifiers:broken_judge"},
                          data={"path": str(prompts)})
    run_dir = tmp_path / "run"
    assert main(["run", str(config), f"run_dir={run_dir}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert 'verifiers.py", line' in "\n".join(err) and "in broken_judge" in "\n".join(err)
    assert not any("nash_jax" in line for line in err[:-1] if line.startswith("  File")), err
    assert err[-1].startswith("nash-jax run: error: judge.function='tests.recipes.verifiers:broken_judge' "
                              "raised KeyError: ") and "in judging iteration 0 (" in err[-1], err[-1]
    inputs = json.loads((run_dir / "manifest.json").read_text())["inputs"]
    assert inputs["prompts"]["duplicates_dropped"] == 20  # and the samples are kept for the rerun
    assert (run_dir / "iter_0" / "samples.parquet").is_file()


def test_warm_start_fit_model_applies_only_to_a_model_directory_in_a_recipe_with_demonstrations(tmp_path):
    run_dir = f"run_dir={tmp_path / 'run'}"
    with pytest.raises(ValueError, match=r"warm_start.fit_model=true: model.path=builtin:ssr is a built-in"):
        engine.run(load_config(CONFIGS / "ssr_demo.yaml", ["warm_start.fit_model=true", run_dir]))
    with pytest.raises(ValueError, match=r"warm_start.fit_model=true: recipe sppo has no demonstrations"):
        engine.run(load_config(small_config(tmp_path), ["warm_start.fit_model=true", run_dir,
                                                        f"model.path={tmp_path}"]))
    with pytest.raises(ValueError, match=r"warm_start.fit_model=true with model.lora: the fit would train "
                                         r"every weight"):
        engine.run(load_config(CONFIGS / "smollm2_ssr.yaml", ["model.lora={rank: 4}", run_dir]))
    assert not (tmp_path / "run").exists()


def test_pi_0_is_the_runs_fit_of_a_model_directory_once_it_exists(tmp_path):
    from nash_jax.engine import policy_files

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    run = tmp_path / "run"
    assert policy_files.initial_policy_dir(str(model), run) == model
    (run / "init" / "policy").mkdir(parents=True)
    (run / "init" / "policy" / "config.json").write_text("{}")
    assert policy_files.initial_policy_dir(str(model), run) == run / "init" / "policy"


def test_a_built_in_prompt_set_with_a_bad_count_is_refused_before_anything_is_written(tmp_path):
    config = load_config(small_config(tmp_path), ["data.path=builtin:synthetic:many",
                                                   f"run_dir={tmp_path / 'run'}"])
    with pytest.raises(ValueError, match="data.path=builtin:synthetic:many: 'many' is not a count of "
                                         "prompts; expected builtin:synthetic"):
        engine.run(config)
    assert not (tmp_path / "run").exists()
