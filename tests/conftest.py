"""Test-wide set-up. 8 simulated CPU devices must be requested before JAX is first imported, so that
every sharding test can build a real multi-device mesh on one CPU."""

import os

os.environ["XLA_FLAGS"] = " ".join(
    flag for flag in os.environ.get("XLA_FLAGS", "").split()
    if not flag.startswith("--xla_force_host_platform_device_count")
) + " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", False)

from tests.tiny_hf import hf_model_dir  # noqa: E402,F401  (a fixture for every test directory)
