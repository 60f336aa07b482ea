from tests.judges.tiny_pairrm import pairrm_dir  # noqa: F401  (the fixture)
