"""A new recipe is one module: a recipe defined in tests/recipes/toy_recipe.py, with its own config
section, objective and checkpointed state, runs through `nash-jax run` and resumes after SIGKILL without
any change to the package."""

import json
import signal
import subprocess

import numpy as np
import pytest
import yaml

from nash_jax.runs import read_metrics
from tests.processes import USER_CLI
from tests.recipes.conftest import REPO, assert_same_parameters, run_cli, small_config

pytestmark = pytest.mark.long


@pytest.fixture(scope="module")
def toy_config(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("toy")
    path = small_config(tmp, name="toy", recipe="toy_reinforce",
                        toy_reinforce={"steps": 8, "prompts_per_step": 8})
    values = yaml.safe_load(path.read_text())
    values.update(imports=["tests.recipes.toy_recipe"])
    path.write_text(yaml.safe_dump(values))
    return tmp, path


def test_a_recipe_defined_outside_the_package_runs_checkpoints_and_resumes(toy_config):
    tmp, config_path = toy_config
    whole, killed = tmp / "whole", tmp / "killed"
    result = run_cli(config_path, whole)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "final_vs_initial" in result.stdout
    report = json.loads((whole / "report.json").read_text())
    assert report["recipe"] == "toy_reinforce" and report["iterates"] == ["pi_0", "pi_1"]
    assert report["per_iteration"][0]["steps"] == list(range(1, 9))

    result = run_cli(config_path, killed, crash_at="toy:step=5")  # after the checkpoint at step 4
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    logged = [m["step"] for m in read_metrics(killed / "metrics.jsonl") if m["stage"] == "toy"]
    assert 4 in logged, f"the checkpointed step's metrics were lost: {logged}"
    result = run_cli(config_path, killed)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_parameters(killed / "iter_0" / "policy", whole / "iter_0" / "policy")
    baselines = [json.loads((d / "manifest.json").read_text())["stages"]["toy"]["info"]["baseline"]
                 for d in (whole, killed)]
    assert baselines[0] == baselines[1], baselines  # the extra state came back from the checkpoint
    ours = {(m["stage"], m["step"]): m["loss"] for m in read_metrics(whole / "metrics.jsonl")}
    resumed = {(m["stage"], m["step"]): m["loss"] for m in read_metrics(killed / "metrics.jsonl")}
    np.testing.assert_array_equal([resumed[k] for k in sorted(ours) if k[0] == "toy"],
                                  [ours[k] for k in sorted(ours) if k[0] == "toy"])

    # the run directory's config names its imports, so `nash-jax report` finds the recipe again
    (whole / "report.json").unlink()
    result = subprocess.run([*USER_CLI, "report", str(whole)], cwd=REPO,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((whole / "report.json").read_text())["recipe"] == "toy_reinforce"


def test_registering_a_section_or_objective_twice_is_refused():
    from dataclasses import dataclass

    from nash_jax.engine import Recipe, register
    from nash_jax.train import Objective, objectives
    from tests.recipes import toy_recipe

    @dataclass(frozen=True)
    class Other:
        x: int = 1

    with pytest.raises(ValueError, match="config section 'toy_reinforce' is recipe 'toy_reinforce'"):
        register(Recipe(name="another", run=toy_recipe.run_toy, section="toy_reinforce",
                        section_type=Other))
    with pytest.raises(ValueError, match="config section 'train' is taken by a shared section"):
        register(Recipe(name="another", run=toy_recipe.run_toy, section="train", section_type=Other))
    with pytest.raises(ValueError, match="an objective named 'sppo' is already registered"):
        objectives.register(Objective("sppo", toy_recipe.reinforce))
