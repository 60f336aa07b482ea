"""Two processes × 4 CPU devices on 127.0.0.1 (gloo collectives) train like one 8-device process."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from nash_jax import parallel
from tests.processes import free_port, run_processes
from tests.unit.train.multiprocess_worker import sppo_run

pytestmark = pytest.mark.long

ROOT = Path(__file__).resolve().parents[3]


def test_two_processes_agree_with_one_process(tmp_path):
    port, out = free_port(), tmp_path / "result.json"
    codes, logs = run_processes([[sys.executable, "-m", "tests.unit.train.multiprocess_worker", str(i), "2",
                                  str(port), str(out)] for i in range(2)], timeout=240, cwd=ROOT)
    assert codes == [0, 0], "\n\n".join(log[-3000:] for log in logs)
    result = json.loads(out.read_text())
    assert (result["devices"], result["local_devices"]) == (8, 4)

    single = sppo_run(parallel.make_mesh(1, -1, 2), slice(None))
    print(f"two processes {result['losses']}, one process {single}")
    np.testing.assert_allclose(result["losses"], single, rtol=1e-5)
