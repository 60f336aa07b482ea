"""`recipe: ssr` (SSR) end to end on a tiny model through the CLI: anchors in report.json, the
saved artifacts re-validated by `nash-jax ssr-validate`, and resumption after SIGKILL while the
sandbox validates equal to an uninterrupted run. One run is shared by the assertions."""

import json
import signal
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

from nash_jax.recipes.ssr import AnchorConfig, SSRConfig, evaluate_anchors
from nash_jax.recipes.ssr.credit import FAILURES
from nash_jax.recipes.ssr.game import Game
from nash_jax.recipes.ssr.task import TaskData, read_bugs
from nash_jax.runs import read_metrics
from nash_jax.tasks.code.ssr_artifact import policy_text
from nash_jax.tasks.code import code_repositories
from tests.processes import USER_CLI
from tests.recipes.conftest import (REPO, assert_same_metrics, assert_same_parameters, nested_config,
                                   run_cli, whole_run_of)

pytestmark = pytest.mark.long

# 2 repositories × 2 injectors × (1 + 1 solver) = 8 rows: a multiple of the 8 test devices.
TINY = {
    "warm_start": {"steps": 2, "batch_size": 8, "hidden_size": 32},
    "data": {"max_prompt_tokens": 64},
    "sampling": {"temperature": 1.0},  # so that the behaviour log-probs are the policy's own
    "train": {"checkpoint_every": 1},
    # the hand-written training repositories, and one generated held-out one (tasks.code.generated_repos)
    "ssr": {"repositories": None, "heldout_repositories": [], "generated": {"train": 0, "heldout": 1},
                      "steps": 2, "repositories_per_step": 2, "injectors_per_repository": 2,
                      "solvers_per_artifact": 1, "demonstrations": 2, "injector_max_tokens": 24,
                      "solver_max_tokens": 128,
                      # the anchors' injector batch is the training one's shape: one compiled sampler
                      "anchors": {"eval_every": 2, "heldout_bugs": 1, "repositories": 2,
                                  "injectors_per_repository": 2}},
}


def tiny_config(tmp_path, name="ssr"):
    return nested_config(tmp_path, "ssr_demo", name, TINY)


def ssr_validate(directory):
    return subprocess.run([*USER_CLI, "ssr-validate", str(directory), "--json"], capture_output=True,
                          text=True, cwd=REPO, check=False, timeout=120)


@pytest.fixture(scope="module")
def whole_run(tmp_path_factory):
    return whole_run_of(tmp_path_factory, "ssr", tiny_config)


def test_a_run_reports_its_anchors_warm_start_first(whole_run):
    tmp, _, result = whole_run
    assert "anchor steps: 0, 2 (step 0 = the warm start)" in result.stdout
    assert "held-out repair rate: " in result.stdout
    report = json.loads((tmp / "whole" / "report.json").read_text())
    anchors = report["anchors"]
    assert anchors["step"] == [0, 2]
    for key in ("heldout_repair_rate", "valid_artifact_rate", "distinct_edits"):
        assert len(anchors[key]) == 2 and all(0.0 <= v <= 1.0 for v in anchors[key]), (key, anchors[key])
    # four anchor artifacts per step, each counted valid or by the first check it failed
    for step in range(2):
        failed = sum(anchors["failed_checks"][name][step] for name in FAILURES)
        assert failed + anchors["valid_artifacts"][step] == 4, anchors
    assert all(sum(row) in (0.0, pytest.approx(1.0)) for row in anchors["solve_rate_distribution"])
    assert report["heldout_bugs"] == 1 and report["demonstrations"] == 2
    assert report["repositories"]["train"] == code_repositories.names("train")
    assert report["repositories"]["heldout"] == [str(tmp / "whole" / "data" / "ssr" / "repos" / "gen_heldout_000")]
    assert report["sandbox"]["rlimits"], report["sandbox"]
    steps = [m for m in read_metrics(tmp / "whole" / "metrics.jsonl") if m["stage"] == "ssr"]
    assert [m["step"] for m in steps] == [1, 2]
    assert all(m["ratio_mean"] == pytest.approx(1.0, abs=1e-4) for m in steps)  # behaviour log-probs align
    assert all(m["injector_reward"] >= -1.0 and m["trained_rows"] >= 4 for m in steps)
    assert all(m["sandbox_s"] >= 0.0 for m in steps), steps
    assert 0.0 <= report["sandbox_share_of_steps"] <= 1.0
    assert "![anchors.png](anchors.png)" in (tmp / "whole" / "report.md").read_text()


def test_the_runs_held_out_bug_is_an_artifact_that_ssr_validate_accepts(whole_run):
    tmp, _, _ = whole_run
    assert len(list((tmp / "whole" / "data" / "ssr" / "demonstrations").iterdir())) == 2
    (folder,) = (tmp / "whole" / "data" / "ssr" / "heldout").iterdir()
    result = ssr_validate(folder)
    assert result.returncode == 0, (folder, result.stdout[-2000:], result.stderr[-2000:])
    assert json.loads(result.stdout)["valid"]


def test_an_anchor_step_saves_each_valid_artifact_for_ssr_validate(whole_run, tmp_path):
    """The anchors of a policy that writes the run's demonstrations (a scripted one: the tiny run's
    model writes none that pass): every valid one is saved with its checks and re-validates."""
    tmp, _, _ = whole_run
    bugs = read_bugs(tmp / "whole" / "data" / "ssr" / "demonstrations", {})
    config = SimpleNamespace(seed=0, ssr=SSRConfig(
        solvers_per_artifact=2, anchors=AnchorConfig(repositories=2, injectors_per_repository=1)))
    game = ScriptedGame(config, {b.repository.entry: (policy_text(b.artifact), b.repair_diff) for b in bugs})
    repos = [b.repository for b in bugs]
    metrics = evaluate_anchors(config, game, TaskData(repos, [], [], bugs[:1], repos), None, tmp_path, step=3)
    assert metrics["valid_artifact_rate"] == 1.0 and metrics["valid_artifacts"] == 2.0, metrics
    assert metrics["heldout_repair_rate"] == 1.0 and metrics["solve_rate_2_of_2"] == 1.0, metrics
    saved = sorted((tmp_path / "anchor_artifacts" / "step_3").iterdir())
    assert [p.name.split("_", 1)[1] for p in saved] == [r.name for r in repos]
    for folder in saved:
        checks = json.loads((folder / "checks.json").read_text())
        assert checks["valid"] and len(checks["checks"]) == 8, checks
    result = ssr_validate(saved[0])
    assert result.returncode == 0, (saved[0], result.stdout[-2000:], result.stderr[-2000:])


class ScriptedGame(Game):
    """The recipe's Game (its checks and grader in the sandbox), with a policy that writes a fixed
    artifact per repository and its exact repair."""

    def __init__(self, config, scripts):
        self.config, self.b, self.scripts = config, config.ssr, scripts
        self.settings, self.sandbox_s = self.b.check_settings(), 0.0

    def inject(self, model, repos, num_samples, key):
        texts = [[self.scripts[r.entry][0]] * num_samples for r in repos]
        return [[0]] * len(repos), _samples(len(repos), num_samples), texts

    def solve(self, model, bugs, num_samples, key, greedy=False):
        repairs = [[next(fix for text, fix in self.scripts.values() if a.bug_diff in text)] * num_samples
                   for a, _ in bugs]
        return [[0]] * len(bugs), _samples(len(bugs), num_samples), repairs


def _samples(rows, k):
    return SimpleNamespace(tokens=np.ones((rows, k, 1), np.int32), lengths=np.ones((rows, k), np.int32),
                           logprobs=np.zeros((rows, k, 1), np.float32), finished=np.ones((rows, k), bool))


def test_resuming_after_sigkill_during_validation_equals_an_uninterrupted_run(whole_run):
    tmp, path, _ = whole_run
    killed = tmp / "killed"
    result = run_cli(path, killed, crash_at="ssr:validate:step=2")
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    result = run_cli(path, killed)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_parameters(killed / "iter_0" / "policy", tmp / "whole" / "iter_0" / "policy")
    assert_same_metrics(tmp / "whole", killed, "ssr")
    a, b = (json.loads((d / "report.json").read_text()) for d in (tmp / "whole", killed))
    assert a["anchors"] == b["anchors"]
