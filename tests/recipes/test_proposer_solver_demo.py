"""The proposer-solver demo's claims (configs/proposer_solver_demo.yaml), in a module of its own so
that pytest-xdist can run it beside the recipe's other tests."""

import json

import numpy as np
import pytest

from tests.recipes.conftest import CONFIGS, run_cli
from tests.recipes.test_proposer_solver_recipe import IMPORTS

pytestmark = pytest.mark.long


def test_the_shipped_demo_reaches_its_claims(tmp_path):
    """configs/proposer_solver_demo.yaml as shipped, on one CPU device as `nash-jax run` runs it: what
    held on every one of 5 seeds (README, "Proposer–solver self-play"): held-out accuracy up by 0.15 and
    above the warm start at every anchor step, mean learnability up, the valid-proposal rate and
    distinct-2 not collapsing (the smallest shares seen: 0.828 and 0.705), and the curriculum moving
    mass from p̂ = 0 to the middle."""
    result = run_cli(CONFIGS / "proposer_solver_demo.yaml", tmp_path / "demo", one_device=True,
                     args=[f"imports={IMPORTS}"])
    assert result.returncode == 0, result.stderr[-3000:]
    a = json.loads((tmp_path / "demo" / "report.json").read_text())["anchors"]
    print({k: v for k, v in a.items() if k != "p_hat_distribution"})
    held, learn, valid, distinct = (a[k] for k in ("heldout_accuracy", "mean_learnability",
                                                    "valid_proposal_rate", "distinct_2"))
    assert a["step"] == [0, 10, 20, 30, 40]
    assert held[-1] >= held[0] + 0.15 and min(held[1:]) > held[0], held
    assert learn[-1] > learn[0], learn
    assert min(valid) >= 0.8 * valid[0], valid
    assert min(distinct) >= 0.7 * distinct[0], distinct
    p_hat = np.asarray(a["p_hat_distribution"])
    assert p_hat[-1, 0] < p_hat[0, 0] - 0.15 and p_hat[-1, 1:4].sum() > p_hat[0, 1:4].sum(), p_hat
