"""SPPO with sampling.engine: vllm on the synthetic task: killed in the middle of its generate stage
(after vLLM's second batch), the rerun keeps the finished batches, samples the rest, trains from vLLM's
samples and writes the report; the stage records the engine and the largest gap between vLLM's
log-probs and nash_jax's teacher-forced log π_t; best-of-n draws its candidates with vLLM too. Skipped without a vLLM to run (tests/vllm_python.py)."""

import json

import numpy as np
import pytest

from nash_jax import runs
from nash_jax.runs import RunDir
from tests.recipes.conftest import run_cli, small_config
from tests.vllm_python import vllm_python

pytestmark = pytest.mark.long


def test_sppo_trains_from_vllm_samples_and_a_kill_mid_generate_keeps_the_finished_batches(tmp_path):
    python = vllm_python()
    sampling = {"engine": "vllm", **({"vllm_python": python} if python else {})}
    # heads of 32 (vLLM's CPU attention takes no smaller); 48 prompts: three batches of 16
    config = small_config(tmp_path, warm_start={"hidden_size": 128}, sampling=sampling,
                          sppo={"iterations": 1}, eval={"best_of_n": 2})
    run_dir = tmp_path / "run"
    killed = run_cli(config, run_dir, crash_at="iter_0/generate:batch=2")
    assert killed.returncode == -9, killed.stderr[-3000:]
    kept = {int(p.stem.split("_")[1]): json.loads(p.read_text())
            for p in (run_dir / "iter_0" / "vllm").glob("batch_*.json")}
    assert sorted(kept) == [0, 1]
    assert not RunDir(run_dir).done("iter_0/generate")

    resumed = run_cli(config, run_dir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    run = RunDir(run_dir)
    assert run.done("iter_0/train") and (run_dir / "report.json").is_file()
    samples = runs.read_table(run_dir / "iter_0" / "samples.parquet")
    assert len(samples["prompt"]) == 48
    for b, batch in kept.items():  # the kept batches are the table's rows, as they were sampled
        assert samples["response_ids"][16 * b:16 * (b + 1)] == batch["tokens"]
    info = run.info("iter_0/generate")
    gap = np.abs(np.subtract(samples["logp"], samples["logp_vllm"])).max()
    print(f"largest |log π_t (nash_jax) − vLLM's| over {3 * 48} samples: {gap:.2e}")
    assert info["engine"] == "vllm" and info["vllm_logp_max_abs_diff"] == pytest.approx(gap)
    assert gap < 1e-3, gap
    assert not (run_dir / "iter_0" / "vllm").exists()  # removed once the stage was recorded
    losses = [m["loss"] for m in runs.read_metrics(run_dir / "metrics.jsonl")
              if m["stage"] == "iter_0" and "loss" in m]
    assert losses and np.all(np.isfinite(losses))
    reranked = runs.read_table(run_dir / "eval" / "samples_best_of_2.parquet")  # best-of-n by vLLM too
    assert "logp_vllm" in reranked and len(reranked["responses"][0]) == 2
