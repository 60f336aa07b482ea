"""The `compilation_cache_dir` run option: compiled programs land in the directory, and a resume may
change it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nash_jax import config as config_lib

PROGRAM = """
import sys
import jax, jax.numpy as jnp
from nash_jax.runs import compilation_cache
compilation_cache.enable(sys.argv[1])
print(float(jax.jit(lambda x: jnp.sin(x) * 3 + 1)(jnp.arange(4.0)).sum()))
"""


def test_enable_writes_compiled_programs_to_the_directory(tmp_path):
    env = {k: v for k, v in os.environ.items()  # the test session's own cache must not answer
           if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[3])
    cache = tmp_path / "relative" / "xla"
    subprocess.run([sys.executable, "-c", PROGRAM, "relative/xla"], cwd=tmp_path, env=env,
                   check=True, capture_output=True, timeout=300)
    entries = [p for p in cache.rglob("*") if p.is_file()]
    assert entries, f"no cache entries under {cache}"


def test_a_file_in_the_way_is_named(tmp_path):
    from nash_jax.runs import compilation_cache

    (tmp_path / "taken").write_text("")
    with pytest.raises(ValueError, match=r"compilation_cache_dir=.*taken exists and is not a directory"):
        compilation_cache.enable(tmp_path / "taken")


def test_the_option_parses_and_does_not_change_a_run_identity():
    base = config_lib.build_run_config({"recipe": "sppo"})
    cached = config_lib.build_run_config({"recipe": "sppo", "compilation_cache_dir": "cache/xla"})
    assert base.compilation_cache_dir is None and cached.compilation_cache_dir == "cache/xla"
    assert (config_lib.normalised(config_lib.to_dict(base))
            == config_lib.normalised(config_lib.to_dict(cached)))
