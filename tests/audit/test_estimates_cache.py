"""The memoised Clopper-Pearson limits (estimates._cp_memo) gives the very numbers of the direct
betaincinv evaluation it replaces, at every count, for the sizes and levels audits use."""

from __future__ import annotations

import numpy as np
import pytest

from app.audit import estimates


@pytest.mark.parametrize("n", [1, 2, 7, 50, 641, 5000])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_table_equals_direct(n, confidence):
    level = (1.0 + confidence) / 2.0
    rng = np.random.default_rng(n)
    k = np.concatenate([[0.0, n], rng.integers(0, n + 1, size=200).astype(float)])
    for direct, cached in ((estimates._cp_lower_direct, estimates._cp_lower),
                           (estimates._cp_upper_direct, estimates._cp_upper)):
        np.testing.assert_array_equal(cached(k, n, level), direct(k, n, level))


def test_non_integer_or_out_of_range_counts_take_the_direct_path():
    k = np.array([0.5, 3.0])
    np.testing.assert_array_equal(estimates._cp_lower(k, 10, 0.975), estimates._cp_lower_direct(k, 10, 0.975))
    big = estimates.CP_MEMO_MAX_N + 1
    k = np.array([0.0, 17.0])
    np.testing.assert_array_equal(estimates._cp_upper(k, big, 0.975), estimates._cp_upper_direct(k, big, 0.975))


def test_bound_curves_match_closed_form_edges():
    """Perfect attack: TP = n1, FP = 0 gives the ceiling log(lo / hi) of the exact one-sided limits."""
    from scipy import stats

    n1 = n0 = 100
    level = 0.975
    eps, _ = estimates.bound_curves(np.array([100.0]), n1, np.array([0.0]), n0, 0.95, 0.0)
    tpr_lo = stats.beta.ppf(1 - level, n1, 1)  # k = n: Beta(n, 1)
    fpr_hi = stats.beta.ppf(level, 1, n0)  # k = 0: Beta(1, n)
    assert eps[0] == pytest.approx(np.log(tpr_lo / fpr_hi), rel=1e-12)
