"""Test-wide set-up. 8 simulated CPU devices must be requested before JAX is first imported, so that
every sharding test can build a real multi-device mesh on one CPU."""

import os

from tests.processes import xla_flags

os.environ["XLA_FLAGS"] = xla_flags(devices=8)
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One persistent compilation cache for the session, shared with the recipe tests' subprocesses (they
# inherit the environment): a killed-and-rerun recipe then compiles its programs once, not per launch.
# Under pytest-xdist each worker has its own folder in it: JAX writes a cache entry in place, so two
# workers (or a SIGKILL test's subprocess) must never read one another's half-written entry.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ or "NASH_JAX_TEST_CACHE" in os.environ:
    import tempfile

    root = os.environ.setdefault("NASH_JAX_TEST_CACHE", tempfile.mkdtemp(prefix="nash_jax_test_xla_cache_"))
    os.environ["JAX_COMPILATION_CACHE_DIR"] = os.path.join(root, os.environ.get("PYTEST_XDIST_WORKER", "main"))
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"

import jax  # noqa: E402

jax.config.update("jax_enable_x64", False)

from tests.real_checkpoints import gemma3_dir, smollm2_dir  # noqa: E402,F401  (session fixtures)
from tests.tiny_hf import hf_model_dir  # noqa: E402,F401  (a fixture for every test directory)


def pytest_collection_modifyitems(items):
    """The `long` modules first, each in collection order: pytest-xdist hands modules to workers in this
    order, and a long one started last would run alone at the end. The key is the module's (a module
    with any long test is long), so that no module is split and its fixtures are set up once."""
    def module(item):
        return item.nodeid.split("::")[0]

    long_modules = {module(item) for item in items if item.get_closest_marker("long")}
    items.sort(key=lambda item: module(item) not in long_modules)
