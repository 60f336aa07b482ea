"""Length-controlled win rates on synthetic preferences whose length bias is known by construction."""

import numpy as np
import pytest
from scipy.special import expit

from nash_jax.core.length_control import fit_length_controlled, length_controlled_table


def test_a_judge_that_only_likes_length_is_near_half_once_length_is_controlled():
    rng = np.random.default_rng(0)
    n = 600
    longer, shorter = rng.normal(40, 10, n), rng.normal(20, 10, n)  # a answers longer than b
    diff = longer - shorter
    prefs = expit(2.5 * np.tanh(diff / diff.std()))  # equal quality: only length moves the judge
    fit = fit_length_controlled(prefs, diff)
    print(fit)
    assert fit["raw"] > 0.75
    assert fit["length_controlled"] == pytest.approx(0.5, abs=0.03)
    assert fit["length_coefficient"] == pytest.approx(2.5, abs=0.1)


def test_hard_labels_separated_by_length_still_fit_near_half():
    rng = np.random.default_rng(1)
    diff = rng.normal(15, 10, 400)
    fit = fit_length_controlled((diff > 0).astype(float), diff)
    print(fit)
    assert fit["raw"] > 0.85 and fit["length_controlled"] == pytest.approx(0.5, abs=0.1)


def test_when_quality_differs_and_length_does_not_both_agree():
    rng = np.random.default_rng(2)
    n = 600
    diff = rng.normal(20, 10, n) - rng.normal(20, 10, n)  # same length distribution
    prefs = np.clip(expit(1.0) + rng.normal(0, 0.05, n), 0, 1)  # a is better, whatever the lengths
    fit = fit_length_controlled(prefs, diff)
    print(fit)
    assert fit["raw"] == pytest.approx(expit(1.0), abs=0.01)
    assert fit["length_controlled"] == pytest.approx(fit["raw"], abs=0.02)


def test_equal_lengths_give_the_raw_win_rate():
    prefs = np.full(50, 0.7)
    fit = fit_length_controlled(prefs, np.zeros(50))
    assert fit["length_controlled"] == pytest.approx(0.7, abs=0.01) and fit["length_coefficient"] == 0


def test_table_is_half_on_the_diagonal_and_antisymmetric():
    rng = np.random.default_rng(3)
    m, b, n = 2, 40, 3
    lengths = rng.integers(5, 30, (n, b, m)).astype(float)
    pref = np.empty((m, b, n, n))
    for i in range(n):
        for j in range(n):
            pref[:, :, i, j] = expit(0.1 * (lengths[i] - lengths[j]) + 0.3 * (i - j)).T
    table = length_controlled_table(pref, lengths)
    assert np.allclose(np.diag(table), 0.5)
    np.testing.assert_allclose(table + table.T, 1.0)
    assert table[2, 0] > 0.5 > table[0, 2]


def test_mismatched_inputs_are_refused_with_the_shapes():
    with pytest.raises(ValueError, match="expected two equal"):
        fit_length_controlled(np.full(3, 0.5), np.zeros(4))
    with pytest.raises(ValueError, match=r"outside \[0, 1\]"):
        fit_length_controlled(np.array([1.5, 0.2]), np.zeros(2))
    with pytest.raises(ValueError, match="lengths"):
        length_controlled_table(np.full((1, 2, 3, 3), 0.5), np.zeros((3, 2, 2)))
