"""The iterative SPPO recipe end to end: artifacts, manifest, exports, resumption after SIGKILL, bad input."""

import json
import signal

import numpy as np
import pytest
import torch
import transformers

from nash_jax import engine, runs
from nash_jax.engine import judging
from nash_jax.cli import main
from nash_jax.config import load_config
from nash_jax.judges.simple import CallableJudge
from nash_jax.runs import RunDir, read_metrics
from tests.recipes.conftest import assert_same_parameters, run_cli, small_config

pytestmark = pytest.mark.long

STAGES = ["init"] + [f"iter_{t}/{s}" for t in range(2)
                     for s in ("prompts", "generate", "judge", "build", "train")]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One uninterrupted two-iteration run, in this process."""
    tmp = tmp_path_factory.mktemp("sppo")
    config_path = small_config(tmp)
    config = load_config(config_path, [f"run_dir={tmp / 'run'}"])
    report = engine.run(config)
    return config_path, tmp / "run", report


def test_two_iterations_write_every_artifact_and_record_every_stage(finished_run):
    _, run_dir, report = finished_run
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert set(STAGES) <= set(manifest["stages"])
    run = RunDir(run_dir)
    assert all(run.done(stage) for stage in STAGES)
    for t in range(2):
        for name in ("prompts", "samples", "judgments", "examples"):
            assert (run_dir / f"iter_{t}" / f"{name}.parquet").is_file()
    assert (run_dir / "config.yaml").is_file() and (run_dir / "metrics.jsonl").is_file()
    assert any((run_dir / "tensorboard").iterdir())
    assert report["iterates"] == ["pi_0", "pi_1", "pi_2"]


def test_exported_policies_load_in_transformers_and_anchor_the_next_iteration(finished_run):
    """Iteration 1's anchor log-probs (from the sampler) equal π_1's log-probs as transformers
    computes them from iter_0/policy."""
    _, run_dir, _ = finished_run
    model = transformers.AutoModelForCausalLM.from_pretrained(run_dir / "iter_0" / "policy").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(run_dir / "iter_0" / "policy")
    samples = runs.read_table(run_dir / "iter_1" / "samples.parquet")
    worst = 0.0
    for b in range(4):
        for k in range(3):
            prompt, response = samples["prompt_ids"][b], samples["response_ids"][b][k]
            ids = torch.tensor([prompt + response])
            with torch.no_grad():
                logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
            picked = logp[torch.arange(len(prompt) - 1, ids.shape[1] - 1), ids[0, len(prompt):]]
            worst = max(worst, abs(float(picked.sum()) - samples["logp"][b][k]))
    assert worst < 1e-4, f"max |Δ log π_1(y)| = {worst}"
    assert tokenizer.decode(samples["prompt_ids"][0]).startswith("<s>")


def test_runs_killed_during_each_stage_resume_to_identical_parameters(finished_run, tmp_path):
    config_path, reference_dir, _ = finished_run
    run_dir = tmp_path / "killed"
    for crash_at in ("iter_0/generate:batch=1", "iter_0/judge:call=1", "iter_1:step=6"):
        result = run_cli(config_path, run_dir, crash_at)
        assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert "iter_1/train" not in manifest["stages"] and "iter_1/build" in manifest["stages"]
    assert (run_dir / "iter_1" / "checkpoints").is_dir()  # the last kill came after a checkpoint
    result = run_cli(config_path, run_dir)
    assert result.returncode == 0, result.stderr[-2000:]
    for t in range(2):
        assert_same_parameters(run_dir / f"iter_{t}" / "policy", reference_dir / f"iter_{t}" / "policy")
    # determinism: the same config and seed draw the same samples
    assert (runs.read_table(run_dir / "iter_1" / "samples.parquet")
            == runs.read_table(reference_dir / "iter_1" / "samples.parquet"))
    assert "final_vs_initial" in result.stdout


def test_a_judge_returning_nan_stops_with_a_clear_message_and_loses_no_work(tmp_path, monkeypatch):
    config = load_config(small_config(tmp_path), [f"run_dir={tmp_path / 'run'}", "sppo.iterations=1"])
    real_make_judge = judging.make_judge
    monkeypatch.setattr(judging, "make_judge", lambda *a, **k: CallableJudge(lambda p, x, y: float("nan")))
    with pytest.raises(ValueError, match=r"judging iteration 0 \(.*samples.parquet\), prompts 0-15: "
                                         r"CallableJudge returned, for prompt 0: P\[0,1\]=nan"):
        engine.run(config)
    run = RunDir(tmp_path / "run")
    assert run.done("iter_0/generate") and not run.done("iter_0/judge")
    generated_at = run.manifest["stages"]["iter_0/generate"]["finished_at"]
    monkeypatch.setattr(judging, "make_judge", real_make_judge)
    engine.run(config)
    run = RunDir(tmp_path / "run")
    assert run.manifest["stages"]["iter_0/generate"]["finished_at"] == generated_at  # not redone
    assert run.done("iter_0/train")


def test_a_truncated_artifact_is_never_read_as_finished(finished_run, tmp_path):
    _, run_dir, _ = finished_run
    run = RunDir(run_dir)
    samples = run_dir / "iter_0" / "samples.parquet"
    assert run.done("iter_0/generate")
    copy = tmp_path / "samples.parquet"
    copy.write_bytes(samples.read_bytes())
    try:
        samples.write_bytes(copy.read_bytes()[:-100])
        assert not run.done("iter_0/generate")
    finally:
        samples.write_bytes(copy.read_bytes())
    assert run.done("iter_0/generate")


@pytest.mark.parametrize("override, message", [
    ("model.path=/nowhere/model", "model.path=/nowhere/model: no config.json there; expected a local"),
    ("data.path=/nowhere/prompts.jsonl", "data.path=/nowhere/prompts.jsonl: does not exist; expected a"),
    ("judge.kind=pairrm", "judge.path=None: does not exist; the pairrm judge needs a local PairRM"),
    ("data.path=builtin:synthetic:9", "9 prompts: after 8 held out for evaluation, 1 are left, too few for 2"),
    ("sppo.losss=dpo", "unknown key 'sppo.losss'"),
])
def test_bad_runs_fail_with_a_clear_message(tmp_path, capsys, override, message):
    config_path = small_config(tmp_path)
    assert main(["run", str(config_path), f"run_dir={tmp_path / 'run'}", override]) == 2
    assert message in capsys.readouterr().err


def test_a_different_config_cannot_reuse_a_run_directory(finished_run, capsys):
    config_path, run_dir, _ = finished_run
    assert main(["run", str(config_path), f"run_dir={run_dir}", "sppo.eta=7"]) == 2
    assert "was started with a different config; it differs in sppo.eta" in capsys.readouterr().err


def test_pairwise_baselines_run_from_the_same_recipe(tmp_path):
    """sppo.loss=dpo trains on (winner, loser) pairs anchored to π_t; the anchor equals π_t at step 1."""
    config = load_config(small_config(tmp_path), [f"run_dir={tmp_path / 'run'}", "sppo.iterations=1",
                                                  "sppo.loss=dpo", "sppo.beta=0.1"])
    engine.run(config)
    examples = runs.read_table(tmp_path / "run" / "iter_0" / "examples.parquet")
    assert {"chosen_ids", "rejected_ids", "anchor_logp"} <= set(examples)
    steps = [m for m in read_metrics(tmp_path / "run" / "metrics.jsonl") if m["stage"] == "iter_0"]
    assert steps and all("margin_positive" in m for m in steps)
    assert abs(steps[0]["log_ratio_max"]) < 1e-4 and abs(steps[0]["log_ratio_min"]) < 1e-4
    assert steps[0]["loss"] == pytest.approx(np.log(2), abs=1e-4)  # −log σ(0) at the anchor


def test_a_batch_that_does_not_divide_over_the_mesh_is_refused_before_any_work(tmp_path, capsys):
    config_path = small_config(tmp_path)
    assert main(["run", str(config_path), f"run_dir={tmp_path / 'run'}", "train.batch_size=12"]) == 2
    assert ("train.batch_size=12 does not split into train.micro_batches=1 micro-batches over the "
            "mesh's data × fsdp = 8 devices; expected a multiple of 8") in capsys.readouterr().err
    assert not (tmp_path / "run" / "init").exists()


def test_a_moved_run_directory_reports_and_resumes_where_it_now_is(finished_run, tmp_path):
    import shutil

    _, run_dir, report = finished_run
    moved = tmp_path / "elsewhere" / "run"
    shutil.copytree(run_dir, moved)
    (moved / "report.json").unlink()
    assert main(["report", str(moved)]) == 0
    again = json.loads((moved / "report.json").read_text())
    assert again["win_rate_table"] == report["win_rate_table"] and again["run_dir"] == str(moved)
