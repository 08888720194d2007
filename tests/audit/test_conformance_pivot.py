"""``conformance._pivot``'s null law calls scipy's distribution with its shape (no frozen distribution):
the same two-sided p-values as ``stats.chi2(m)`` / ``stats.gamma(m)`` frozen, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from app.audit.conformance import _pivot, _two_sided


@pytest.mark.parametrize("kind,frozen", [("gaussian", stats.chi2), ("laplace", stats.gamma), ("gumbel", stats.gamma)])
def test_pivot_law_is_the_frozen_distributions(kind, frozen):
    rng = np.random.default_rng(11)
    for m in (2, 3, 8, 48, 384, 3000):
        for scale in (0.1, 0.5, 1.0, 2.0):
            z = rng.normal(0.0, scale, m) if kind != "gumbel" else rng.gumbel(0.0, scale, m)
            stat, law = _pivot(z, kind)
            ref = frozen(m)
            assert law.cdf(stat) == ref.cdf(stat) and law.sf(stat) == ref.sf(stat)
            assert _two_sided(stat, law) == _two_sided(stat, ref)
