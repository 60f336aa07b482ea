"""The bug-injection task's data (recipes/ssr/task.py): where the warm start's
demonstrations come from."""

from pathlib import Path

import pytest

from nash_jax.config.loader import load_config
from nash_jax.recipes.ssr.task import task_data
from nash_jax.runs.directory import RunDir
from tests.recipes.conftest import nested_config


def test_demonstrations_come_only_from_the_first_demonstration_repositories(tmp_path):
    layer = {"ssr": {"repositories": [], "heldout_repositories": [],
                               "generated": {"train": 3, "heldout": 1}, "demonstrations": 4,
                               "demonstration_repositories": 1,
                               "anchors": {"heldout_bugs": 1}}}
    config = load_config(nested_config(tmp_path, "ssr_demo", "task", layer))
    task = task_data(config, RunDir(tmp_path / "run"))
    assert len(task.train) == 3
    # every demonstration is a bug of the first training repository; self-play still draws from all
    assert len(task.demonstrations) == 4
    assert {Path(bug.repository.entry).name for bug in task.demonstrations} == {task.train[0].name}


def test_more_demonstration_repositories_than_training_ones_is_refused_by_name(tmp_path):
    layer = {"ssr": {"repositories": [], "heldout_repositories": [],
                               "generated": {"train": 2, "heldout": 1}, "demonstration_repositories": 3}}
    config = load_config(nested_config(tmp_path, "ssr_demo", "task", layer))
    with pytest.raises(ValueError, match=r"demonstration_repositories=3: there are 2 training"):
        task_data(config, RunDir(tmp_path / "run"))
