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
    held on every one of 5 seeds (README, "Proposer–solver self-play", rerun 2026-12-05): held-out
    accuracy up by 0.1 (the smallest rise seen: 0.117) and above the warm start at every anchor step,
    the valid-proposal rate and distinct-2 not collapsing (the smallest shares of their start seen:
    0.786 and 0.786), and the curriculum taking mass from p̂ = 0 (the smallest fall seen: 0.129).
    Mean learnability ending higher and the middle of p̂ gaining held on 4 seeds of 5, not seed 2,
    so they are not asserted."""
    result = run_cli(CONFIGS / "proposer_solver_demo.yaml", tmp_path / "demo", one_device=True,
                     args=[f"imports={IMPORTS}"])
    assert result.returncode == 0, result.stderr[-3000:]
    a = json.loads((tmp_path / "demo" / "report.json").read_text())["anchors"]
    print({k: v for k, v in a.items() if k != "p_hat_distribution"})
    held, valid, distinct = (a[k] for k in ("heldout_accuracy", "valid_proposal_rate", "distinct_2"))
    assert a["step"] == [0, 10, 20, 30, 40]
    assert held[-1] >= held[0] + 0.1 and min(held[1:]) > held[0], held
    assert min(valid) >= 0.75 * valid[0], valid
    assert min(distinct) >= 0.75 * distinct[0], distinct
    p_hat = np.asarray(a["p_hat_distribution"])
    assert p_hat[-1, 0] < p_hat[0, 0] - 0.1, p_hat
