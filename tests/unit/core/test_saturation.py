"""Win-rate saturation on constructed preference matrices."""

import numpy as np
import pytest

from nash_jax.core.saturation import win_rate_saturation


def test_matrices_of_ties_are_saturated():
    out = win_rate_saturation(np.full((6, 4, 4), 0.5))
    assert out == {"mean_abs_advantage": 0.0, "indistinct_share": 1.0}


def test_a_clear_winner_is_not_saturated():
    pref = np.full((6, 4, 4), 0.5)
    pref[:, 0, 1:], pref[:, 1:, 0] = 0.95, 0.05  # sample 0 beats the others
    out = win_rate_saturation(pref)
    print(out)
    assert out["indistinct_share"] == 0.0
    assert out["mean_abs_advantage"] == pytest.approx((0.3375 + 3 * 0.1125) / 4)
    trained = np.zeros((6, 4), bool)
    trained[:, :2] = True  # winner and one loser
    assert win_rate_saturation(pref, trained)["mean_abs_advantage"] == pytest.approx((0.3375 + 0.1125) / 2)


def test_half_the_prompts_tied():
    pref = np.full((4, 3, 3), 0.5)
    pref[:2, 0, 1], pref[:2, 1, 0] = 0.8, 0.2
    assert win_rate_saturation(pref)["indistinct_share"] == 0.5


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match=r"\[prompts, K, K\]"):
        win_rate_saturation(np.full((4, 3), 0.5))
    with pytest.raises(ValueError, match="trained mask"):
        win_rate_saturation(np.full((4, 3, 3), 0.5), np.zeros((4, 3), bool))
