"""Per-feature drift statistics (numpy and scipy only: ../shared/reference/ai-building-blocks.md, section 4).

- **PSI** (population stability index) for every feature: Σ (c − r)·ln(c / r) over bins, r and c the reference's and
  the current window's shares. Numbers are cut at the reference's deciles (open-ended first and last bins); categories
  are their own bins (a category the reference never had is one more bin). Shares are floored at EPSILON so that an
  empty bin gives a large, finite term. Common reading: < 0.1 stable, 0.1–0.2 moderate, ≥ 0.2 significant.
- **KS** (two-sample Kolmogorov–Smirnov, scipy.stats.ks_2samp) for numbers: the statistic and its p-value.
- **Chi-square** (scipy.stats.chi2_contingency on the 2×k table of counts) for categories: statistic and p-value.

The feature's `score` is its PSI, the same scale for both kinds; a report's score is the largest feature score.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

BINS = 10
EPSILON = 1e-4
NUMERIC = "numeric"
CATEGORICAL = "categorical"


def bin_edges(reference: np.ndarray, bins: int = BINS) -> np.ndarray:
    """Inner cut points: the reference's quantiles, repeated ones merged. Bins: (−∞, e0], (e0, e1], …, (ek, ∞)."""
    quantiles = np.quantile(reference, np.linspace(0, 1, bins + 1)[1:-1])
    return np.unique(quantiles)


def shares_in_bins(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    counts = np.bincount(np.searchsorted(edges, values, side="left"), minlength=len(edges) + 1)
    return counts / max(len(values), 1)


def psi_of_shares(reference: np.ndarray, current: np.ndarray) -> float:
    r = np.clip(reference, EPSILON, None)
    c = np.clip(current, EPSILON, None)
    return float(np.sum((c - r) * np.log(c / r)))


def psi_numeric(reference: Sequence[float], current: Sequence[float], bins: int = BINS) -> float:
    ref, cur = np.asarray(reference, dtype=float), np.asarray(current, dtype=float)
    edges = bin_edges(ref, bins)
    return psi_of_shares(shares_in_bins(ref, edges), shares_in_bins(cur, edges))


def category_counts(reference: Sequence[Any], current: Sequence[Any]) -> tuple[list[str], np.ndarray, np.ndarray]:
    ref, cur = Counter(map(str, reference)), Counter(map(str, current))
    categories = sorted(set(ref) | set(cur))
    return categories, np.array([ref[c] for c in categories], float), np.array([cur[c] for c in categories], float)


def psi_categorical(reference: Sequence[Any], current: Sequence[Any]) -> float:
    _categories, ref, cur = category_counts(reference, current)
    return psi_of_shares(ref / max(ref.sum(), 1), cur / max(cur.sum(), 1))


def ks(reference: Sequence[float], current: Sequence[float]) -> tuple[float, float]:
    from scipy import stats  # 1-2 s to import: paid by the drift check, not by every process that loads the URLs

    result = stats.ks_2samp(np.asarray(reference, float), np.asarray(current, float))
    return float(result.statistic), float(result.pvalue)


def chi_square(reference: Sequence[Any], current: Sequence[Any]) -> tuple[float, float]:
    _categories, ref, cur = category_counts(reference, current)
    if len(ref) < 2:  # one category on both sides: nothing can differ
        return 0.0, 1.0
    from scipy import stats

    statistic, pvalue, _dof, _expected = stats.chi2_contingency(np.vstack([ref, cur]))
    return float(statistic), float(pvalue)


def as_numbers(values: Sequence[Any]) -> np.ndarray | None:
    """The values as floats (blanks dropped), or None when one is not a finite number (a categorical feature)."""
    out = []
    for value in values:
        if value is None or value == "":
            continue
        if isinstance(value, bool):
            return None
        try:
            number = float(value)
        except (TypeError, ValueError):
            return None
        if not math.isfinite(number):
            return None
        out.append(number)
    return np.asarray(out, dtype=float)


def compare_feature(reference: Sequence[Any], current: Sequence[Any]) -> dict[str, Any]:
    """Scores of one feature: {"kind", "score", "psi", and "ks", "ks_p" or "chi2", "chi2_p"}."""
    ref_numbers, cur_numbers = as_numbers(reference), as_numbers(current)
    if ref_numbers is not None and cur_numbers is not None and len(ref_numbers) and len(cur_numbers):
        psi = psi_numeric(ref_numbers, cur_numbers)
        statistic, pvalue = ks(ref_numbers, cur_numbers)
        return {"kind": NUMERIC, "score": psi, "psi": psi, "ks": statistic, "ks_p": pvalue}
    ref_values = [v for v in reference if v is not None and v != ""]
    cur_values = [v for v in current if v is not None and v != ""]
    psi = psi_categorical(ref_values, cur_values)
    statistic, pvalue = chi_square(ref_values, cur_values)
    return {"kind": CATEGORICAL, "score": psi, "psi": psi, "chi2": statistic, "chi2_p": pvalue}


def compare(reference: dict[str, Sequence[Any]], current: dict[str, Sequence[Any]]) -> dict[str, dict[str, Any]]:
    """Every feature present on both sides, compared."""
    return {name: compare_feature(reference[name], current[name]) for name in current if name in reference}


def overall(features: dict[str, dict[str, Any]]) -> float | None:
    scores = [f["score"] for f in features.values()]
    return max(scores) if scores else None
