from tests.unit.judges.tiny_decoders import python_judge_module, tiny_judge_dir  # noqa: F401  (fixtures)
from tests.unit.judges.tiny_pairrm import pairrm_dir  # noqa: F401  (the fixture)

