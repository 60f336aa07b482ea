"""Two processes × 4 CPU devices (gloo) run the SPPO recipe like one 8-device process."""

import os

import numpy as np
import pytest

from nash_jax import engine
from nash_jax.config import load_config
from nash_jax import runs
from nash_jax.runs import read_metrics
from tests.processes import USER_CLI, free_port, run_processes, xla_flags
from tests.recipes.conftest import REPO, policy_tensors, small_config

pytestmark = pytest.mark.long


def test_two_processes_run_the_recipe_like_one(tmp_path):
    # SGD, not Adam: Adam turns a rounding-level difference in a near-zero gradient into a full
    # learning-rate step, so only SGD lets the parameters be compared at float32 rounding.
    sgd = {"name": "sgd", "learning_rate": 0.05, "schedule": "constant", "warmup_ratio": 0.0}
    config_path = small_config(tmp_path, sppo={"iterations": 1},
                               train={"batch_size": 8, "epochs": 2, "checkpoint_every": 4,
                                      "optimizer": sgd},
                               eval={"prompts": 8, "samples_per_prompt": 1})
    single = tmp_path / "single"
    engine.run(load_config(config_path, [f"run_dir={single}"]))

    port, shared = free_port(), tmp_path / "two"
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(devices=4))
    codes, logs = run_processes(
        [[*USER_CLI, "run", str(config_path), f"run_dir={shared}",
          "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i)]
         for i in range(2)], timeout=400, cwd=REPO, env=env)
    assert codes == [0, 0], "\n\n".join(log[-3000:] for log in logs)

    # the same prompts, samples and judgments; log-probs and parameters equal to float32 rounding
    # (the reductions run across processes in another order)
    for name in ("prompts", "samples", "judgments"):
        two = runs.read_table(shared / "iter_0" / f"{name}.parquet")
        one = runs.read_table(single / "iter_0" / f"{name}.parquet")
        np.testing.assert_allclose(two.pop("logp", 0), one.pop("logp", 0), rtol=1e-5)
        assert two == one, name
    losses = [[m["loss"] for m in read_metrics(d / "metrics.jsonl") if m["stage"] == "iter_0"]
              for d in (shared, single)]
    assert len(losses[0]) == len(losses[1]) == 24
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-4)
    a, b = policy_tensors(shared / "iter_0" / "policy"), policy_tensors(single / "iter_0" / "policy")
    worst = max(float(np.max(np.abs(a[k] - b[k]))) for k in a)
    assert worst < 1e-5, f"max |Δθ| = {worst}"
    assert (shared / "report.json").is_file() and "final_vs_initial" in logs[0]
