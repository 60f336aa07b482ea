"""`python -m tests.user_cli ARGS`: the `nash-jax` command in a test's subprocess, as a user's install
runs it: without torch.

The test environment has torch for the parity tests' reference, and transformers and datasets import it
whenever it is installed (a few CPU-seconds a process, ~60 processes a suite). nash_jax never needs it.
"""

import sys

from nash_jax.cli import main  # (sets the environment transformers reads on import)

# While sys.modules holds None for torch, importlib.util.find_spec("torch") is None: transformers and
# datasets read torch's availability once (cached) as a user's install would. The entry goes again
# afterwards, since scipy reads any torch entry in sys.modules as a module.
sys.modules["torch"] = None
try:
    import datasets.config  # noqa: F401
    from transformers.utils import import_utils

    assert not import_utils.is_torch_available()
finally:
    del sys.modules["torch"]

if __name__ == "__main__":
    sys.exit(main())
