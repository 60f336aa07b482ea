"""The proposer-solver demo's claims (configs/proposer_solver_demo.yaml), in a module of its own so
that pytest-xdist can run it beside the recipe's other tests."""

import json

import numpy as np
import pytest

from tests.recipes.conftest import CONFIGS, run_cli
from tests.recipes.test_proposer_solver_recipe import IMPORTS

pytestmark = pytest.mark.long


def test_the_shipped_demo_reaches_its_claims(tmp_path):
    """configs/proposer_solver_demo.yaml as shipped, on one CPU device as `nash-jax run` runs it (the
    figures the README prints): held-out accuracy above the warm start's, mean learnability rising, and
    neither the valid-proposal rate nor distinct-2 collapsing."""
    result = run_cli(CONFIGS / "proposer_solver_demo.yaml", tmp_path / "demo", one_device=True,
                     args=[f"imports={IMPORTS}"])
    assert result.returncode == 0, result.stderr[-3000:]
    a = json.loads((tmp_path / "demo" / "report.json").read_text())["anchors"]
    print({k: v for k, v in a.items() if k != "p_hat_distribution"})
    held, learn, valid, distinct = (a[k] for k in ("heldout_accuracy", "mean_learnability",
                                                    "valid_proposal_rate", "distinct_2"))
    assert a["step"] == [0, 10, 20, 30, 40]
    # README: held-out accuracy 0.234 (warm start) -> 0.406, mean learnability 0.440 -> 0.583,
    # valid-proposal rate 0.781 -> 0.750, distinct-2 0.489 -> 0.381 (runs are deterministic)
    assert held[-1] >= held[0] + 0.1 and min(held[1:]) > held[0], held
    assert learn[-1] >= learn[0] + 0.1 and min(learn[1:]) > learn[0], learn
    assert min(valid) >= 0.9 * valid[0], valid
    assert min(distinct) >= 0.75 * distinct[0], distinct
    p_hat = np.asarray(a["p_hat_distribution"])  # the curriculum: mass leaves p̂ = 0 for the middle
    assert p_hat[-1, 0] < p_hat[0, 0] - 0.25 and p_hat[-1, 1:4].sum() > p_hat[0, 1:4].sum(), p_hat
