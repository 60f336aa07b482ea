from pathlib import Path

import pytest

from tests.judges.tiny_decoders import python_judge_module, tiny_judge_dir  # noqa: F401  (fixtures)
from tests.judges.tiny_pairrm import pairrm_dir  # noqa: F401  (the fixture)


# TEMPORARY: replaced by tests/conftest.py's fixture at merge
@pytest.fixture(scope="session")
def smollm2_dir():
    return Path("/work/real/smollm2_hf")
