"""Launching several test processes that join one JAX run over 127.0.0.1 (gloo on CPU)."""

import os
import socket
import subprocess
import sys

# Test programs are tiny and latency bound: XLA:CPU's LLVM optimisations cost a third of a test's time
# (compiling) and buy nothing (running). Every test process, and every process a test starts, uses these.
FAST_COMPILE_FLAGS = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true")


# The `nash-jax` command for a test's subprocess (run with cwd or PYTHONPATH at the repository root)
USER_CLI = (sys.executable, "-m", "tests.user_cli")


def xla_flags(devices=None):
    """XLA_FLAGS for a test process: the environment's own flags and the fast-compile ones, with
    `devices` simulated CPU devices (None: as many as the platform has, one CPU outside the tests)."""
    kept = [flag for flag in os.environ.get("XLA_FLAGS", "").split()
            if not flag.startswith("--xla_force_host_platform_device_count")]
    kept += [flag for flag in FAST_COMPILE_FLAGS if flag not in kept]
    if devices is not None:
        kept.append(f"--xla_force_host_platform_device_count={devices}")
    return " ".join(kept)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_processes(commands, *, timeout, **popen):
    """Start every command at once, wait for all; returns (return codes, combined output of each).
    Any process still running at the end (another one failed) is killed."""
    workers = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                **popen) for command in commands]
    logs = []
    try:
        for worker in workers:
            logs.append(worker.communicate(timeout=timeout)[0])
    finally:
        for worker in workers:
            worker.kill()
    return [w.returncode for w in workers], logs
