"""Run directories and their artifacts: everything written is written whole or not at all."""

import os
import tempfile
from pathlib import Path


def write_atomically(path, write):
    """Call write(tmp_path) on a temporary file beside `path`, then rename it into place.

    A crash midway leaves at most a hidden `.NAME.*.tmp` file, never a truncated `NAME`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomically(path, text):
    write_atomically(path, lambda tmp: Path(tmp).write_text(text))
