"""The drift statistics on synthetic data: PSI of a known shift against its closed form with the same bins, KS and
chi-square against scipy and hand-computed values, and no drift between samples of one distribution."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from apps.monitoring import drift


def normal_cdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def expected_psi(edges: np.ndarray, shift: float, scale: float = 1.0) -> float:
    """PSI between N(0, 1) and N(shift, scale²) over the bins cut at `edges`: the shares are differences of the
    normal CDF at the edges (−∞ and ∞ at the ends)."""
    cuts = np.concatenate([[-np.inf], edges, [np.inf]])
    reference = np.diff(normal_cdf(cuts))
    current = np.diff(normal_cdf((cuts - shift) / scale))
    return float(np.sum((current - reference) * np.log(current / reference)))


@pytest.mark.parametrize(("shift", "scale"), [(0.5, 1.0), (1.0, 1.0), (0.0, 2.0)])
def test_psi_of_a_known_shift_matches_its_closed_form(shift, scale):
    rng = np.random.default_rng(7)
    reference = rng.normal(0, 1, 200_000)
    current = rng.normal(shift, scale, 200_000)
    edges = drift.bin_edges(reference)

    measured = drift.psi_numeric(reference, current)

    closed_form = expected_psi(edges, shift, scale)
    assert measured == pytest.approx(closed_form, rel=0.03)
    if shift == 1.0:  # the textbook value for a one-sigma shift over deciles
        assert 0.9 < closed_form < 1.1


def test_the_same_distribution_does_not_drift():
    rng = np.random.default_rng(11)
    reference, current = rng.normal(5, 2, 5000), rng.normal(5, 2, 2000)

    result = drift.compare_feature(list(reference), list(current))

    assert result["kind"] == drift.NUMERIC
    assert result["psi"] < 0.02
    assert result["ks_p"] > 0.01
    colours = ["red", "green", "blue"]
    same = drift.compare_feature(list(rng.choice(colours, 3000)), list(rng.choice(colours, 1000)))
    assert same["kind"] == drift.CATEGORICAL
    assert same["psi"] < 0.01
    assert same["chi2_p"] > 0.01


def test_ks_matches_scipy_and_the_hand_computed_statistic():
    assert drift.ks([1, 2, 3], [2, 3, 4]) == pytest.approx((1 / 3, stats.ks_2samp([1, 2, 3], [2, 3, 4]).pvalue))
    rng = np.random.default_rng(3)
    a, b = rng.normal(0, 1, 500), rng.normal(0.3, 1, 400)
    expected = stats.ks_2samp(a, b)
    assert drift.ks(a, b) == pytest.approx((expected.statistic, expected.pvalue))


def test_chi_square_matches_the_formula_on_known_counts():
    reference = ["a"] * 50 + ["b"] * 30 + ["c"] * 20
    current = ["a"] * 20 + ["b"] * 30 + ["c"] * 50
    table = np.array([[50, 30, 20], [20, 30, 50]], float)
    expected = np.outer(table.sum(1), table.sum(0)) / table.sum()
    statistic = float(((table - expected) ** 2 / expected).sum())

    measured, pvalue = drift.chi_square(reference, current)

    assert measured == pytest.approx(statistic)
    assert pvalue == pytest.approx(stats.chi2.sf(statistic, df=2))
    # PSI over the categories, by hand: Σ (c − r) ln(c / r)
    by_hand = (0.2 - 0.5) * math.log(0.2 / 0.5) + 0 + (0.5 - 0.2) * math.log(0.5 / 0.2)
    assert drift.psi_categorical(reference, current) == pytest.approx(by_hand)


def test_a_category_the_reference_never_had_is_a_large_finite_score():
    result = drift.compare_feature(["a", "b"] * 50, ["a", "b", "z", "z"] * 25)

    assert result["kind"] == drift.CATEGORICAL
    assert math.isfinite(result["psi"])
    assert result["psi"] > 1


def test_numbers_in_text_are_numeric_and_words_are_categories():
    assert drift.compare_feature(["1.5", "2", ""], [1.0, 2.5])["kind"] == drift.NUMERIC
    assert drift.compare_feature(["1.5", "x"], [1.0])["kind"] == drift.CATEGORICAL
    assert drift.overall({"a": {"score": 0.1}, "b": {"score": 0.4}}) == 0.4
    assert drift.overall({}) is None
