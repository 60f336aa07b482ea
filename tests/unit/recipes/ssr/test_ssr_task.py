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


def test_sandbox_isolation_required_stops_before_the_run_and_best_effort_says_so(
        tmp_path, monkeypatch, capsys):
    from nash_jax.recipes.ssr.config import check
    from nash_jax.sandbox import bwrap, sandbox
    monkeypatch.setattr(bwrap, "probe", lambda: "bwrap failed (No permissions to create new namespace)")
    sandbox._probe.cache_clear()
    try:
        config = load_config(nested_config(tmp_path, "ssr_demo", "required", {}))
        assert config.ssr.sandbox.isolation == "required"
        with pytest.raises(sandbox.SandboxUnavailable, match=r"ssr\.sandbox\.isolation=best_effort"):
            check(config)
        loose = load_config(nested_config(tmp_path, "ssr_demo", "loose",
                                          {"ssr": {"sandbox": {"isolation": "best_effort"}}}))
        check(loose)
        line = capsys.readouterr().out.strip()
        assert len(line.splitlines()) == 1 and "network_namespace" in line, line
        assert loose.ssr.sandbox.limits().isolation == "best_effort"
    finally:
        sandbox._probe.cache_clear()
