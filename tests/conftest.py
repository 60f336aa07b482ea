"""Test-wide set-up. 8 simulated CPU devices must be requested before JAX is first imported, so that
every sharding test can build a real multi-device mesh on one CPU."""

import os

import pytest

os.environ["XLA_FLAGS"] = " ".join(
    flag for flag in os.environ.get("XLA_FLAGS", "").split()
    if not flag.startswith("--xla_force_host_platform_device_count")
) + " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One persistent compilation cache for the session, shared with the recipe tests' subprocesses (they
# inherit the environment): a killed-and-rerun recipe then compiles its programs once, not per launch.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="nash_jax_test_xla_cache_")
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"

import jax  # noqa: E402

jax.config.update("jax_enable_x64", False)

from tests.tiny_hf import hf_model_dir  # noqa: E402,F401  (a fixture for every test directory)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Under pytest-xdist's loadgroup, keep the tests of a module that share a module-scoped fixture
    (an end-to-end run several tests read) on one worker, so that the run is made once."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info and any(defs[-1].scope == "module" for defs in info.name2fixturedefs.values()):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
