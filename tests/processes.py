"""Launching several test processes that join one JAX run over 127.0.0.1 (gloo on CPU)."""

import socket
import subprocess


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
