"""configs/smollm2_sppo.yaml shortened to minutes (as tests/claims/test_smollm2_sppo.py shortens it),
with sampling.engine: vllm: the real SmolLM2-135M-Instruct sampled by vLLM in its worker subprocess
trains, and the report holds the held-out accuracy of both iterates. Skipped without a vLLM to run
(tests/vllm_python.py); the full config's accuracy with each engine is for a machine with a GPU."""

import json

import numpy as np
import pytest

from nash_jax import runs
from tests.claims.test_smollm2_sppo import shortened
from tests.recipes.conftest import CONFIGS, run_cli
from tests.vllm_python import vllm_python

pytestmark = pytest.mark.long


def test_smollm2_sppo_trains_from_vllm_samples(smollm2_dir, tmp_path):
    python = vllm_python()
    run_dir = tmp_path / "run"
    engine = ["sampling.engine=vllm", *([f"sampling.vllm_python={python}"] if python else [])]
    result = run_cli(CONFIGS / "smollm2_sppo.yaml", run_dir, one_device=True,
                     args=(*shortened(smollm2_dir), *engine))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((run_dir / "report.json").read_text())
    assert len(report["heldout_accuracy"]) == 2
    samples = runs.read_table(run_dir / "iter_0" / "samples.parquet")
    gap = float(np.abs(np.subtract(samples["logp"], samples["logp_vllm"])).max())
    info = json.loads((run_dir / "manifest.json").read_text())["stages"]["iter_0/generate"]["info"]
    print(f"SmolLM2 SPPO with vLLM: held-out accuracy {report['heldout_accuracy']}, largest "
          f"|log π_t − vLLM's| {gap:.2e}")
    assert info["engine"] == "vllm" and gap < 1e-2, gap
    losses = [m["loss"] for m in runs.read_metrics(run_dir / "metrics.jsonl")
              if m["stage"] == "iter_0" and "loss" in m]
    assert losses and np.all(np.isfinite(losses))
