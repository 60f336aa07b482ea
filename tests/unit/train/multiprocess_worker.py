"""One process of the two-process test: 4 CPU devices each, one 8-device mesh, three SPPO steps.

Run by tests/unit/train/test_multiprocess.py as
    python -m tests.unit.train.multiprocess_worker PROCESS_ID NUM_PROCESSES PORT OUT_JSON
"""

import json
import os
import sys

import jax
import numpy as np

from nash_jax import parallel
from tests.processes import xla_flags


def sppo_run(mesh, process_rows):
    """Three SPPO steps on the shared test batch; `process_rows` picks this process's examples."""
    from nash_jax.train import make_step
    from tests.unit.train.conftest import setup, token_batch

    model_def, state, shardings, _, tx, schedule, logprobs = setup(mesh=mesh)
    batch = token_batch(16, seed=11)
    batch = {k: v[process_rows] for k, v in batch.items()}
    batch["anchor_logp"] = np.array(logprobs(state.params, batch))[process_rows]
    batch["win_rate"] = np.random.default_rng(12).uniform(size=16).astype(np.float32)[process_rows]
    step = make_step("sppo", model_def, tx, schedule, shardings, mesh, eta=20.0, micro_batches=2)
    losses = []
    for _ in range(3):
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    return losses


def main():
    # Before JAX touches a device (the test process, which imports sppo_run, keeps its own 8).
    os.environ["XLA_FLAGS"] = xla_flags(devices=4)
    os.environ["JAX_PLATFORMS"] = "cpu"
    process_id, num_processes, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    parallel.init_distributed(parallel.DistributedConfig(
        coordinator_address=f"127.0.0.1:{port}", num_processes=num_processes, process_id=process_id))
    mesh = parallel.make_mesh(1, -1, 2)  # all 8 devices of both processes: fsdp 4 × tensor 2
    rows = 16 // num_processes
    losses = sppo_run(mesh, slice(process_id * rows, (process_id + 1) * rows))
    if process_id == 0:
        with open(out, "w") as f:
            json.dump({"losses": losses, "devices": jax.device_count(),
                       "local_devices": jax.local_device_count()}, f)


if __name__ == "__main__":
    main()
