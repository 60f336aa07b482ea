"""Two processes × 4 CPU devices on 127.0.0.1 (gloo collectives) train like one 8-device process."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np

from nash_jax import parallel
from tests.train.multiprocess_worker import sppo_run

ROOT = Path(__file__).resolve().parents[2]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_agree_with_one_process(tmp_path):
    port, out = free_port(), tmp_path / "result.json"
    workers = [subprocess.Popen([sys.executable, "-m", "tests.train.multiprocess_worker", str(i), "2",
                                 str(port), str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for i in range(2)]
    logs = []
    try:
        for worker in workers:
            logs.append(worker.communicate(timeout=240)[0])
    finally:
        for worker in workers:
            worker.kill()
    assert all(w.returncode == 0 for w in workers), "\n\n".join(log[-3000:] for log in logs)
    result = json.loads(out.read_text())
    assert (result["devices"], result["local_devices"]) == (8, 4)

    single = sppo_run(parallel.make_mesh(1, -1, 2), slice(None))
    print(f"two processes {result['losses']}, one process {single}")
    np.testing.assert_allclose(result["losses"], single, rtol=1e-5)
