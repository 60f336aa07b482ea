"""The two real checkpoints the test extra installs, imported once per test run (`smollm2_dir`,
`gemma3_dir`; registered for every test directory by tests/conftest.py).

Under pytest-xdist every worker asks for the same import: the first one does it in a directory the
workers share (the run's base temporary directory) under a file lock, the others wait and reuse it
(pytest-xdist's documented recipe for session fixtures).
"""

import os

import pytest
from filelock import FileLock

from nash_jax.models.gguf import import_gguf
from nash_jax.models.packaged import gemma3_gguf, smollm2_gguf


def shared_import(tmp_path_factory, name, gguf_file):
    """The HF directory imported from gguf_file(shared directory), made once per test run."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root = shared / "real_checkpoints"
    root.mkdir(exist_ok=True)
    out = root / name
    with FileLock(str(root / f"{name}.lock")):
        if not out.is_dir():  # import_gguf writes the whole directory or none of it
            import_gguf(gguf_file(root), out)
    return out


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory):
    """SmolLM2-135M-Instruct as a Hugging Face directory (fp32)."""
    return shared_import(tmp_path_factory, "smollm2", smollm2_gguf)


@pytest.fixture(scope="session")
def gemma3_dir(tmp_path_factory):
    """Gemma-3-270M (base) as a Hugging Face directory (fp32)."""
    return shared_import(tmp_path_factory, "gemma3", gemma3_gguf)
