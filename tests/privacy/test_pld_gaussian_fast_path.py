"""The Gaussian-only fast path of ``Composed.log_delta`` (issue 27: an answer's budget check solves for
epsilon with ~13 evaluations): bit-identical to the general branch, and equal to Balle & Wang's closed
form (2018, Theorem 8) computed independently with scipy."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from app.privacy.pld import _POINT, Composed, _Discrete


def _general(mu: float) -> Composed:
    # An atom at 0 that is not the module's _POINT object: the general (array) branch runs
    return Composed(mu, _Discrete(np.zeros(1), np.ones(1), 0.0))


def test_fast_path_is_bit_identical_to_the_general_branch():
    rng = np.random.default_rng(7)
    mus = [1e-6, 1e-3, 0.3, 1.0, 2.5, 10.0, 80.0, *rng.uniform(0.01, 40.0, 60)]
    checked = 0
    for mu in mus:
        fast, slow = Composed(float(mu), _POINT), _general(float(mu))
        assert fast.gaussian_only
        c = mu * mu / 2.0 + 14.0 * mu
        for eps in [0.0, 1e-300, c * (1 - 1e-15), c, 2 * c, *rng.uniform(0.0, 1.5 * c, 30)]:
            a, b = fast.log_delta(float(eps)), slow.log_delta(float(eps))
            assert a == b, (mu, eps, a, b)
            checked += 1
        for delta in (1e-12, 1e-5, 0.3):
            assert fast.epsilon(delta) == slow.epsilon(delta)
    assert checked > 2000


def test_fast_path_matches_the_closed_form():
    """delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) for the Gaussian mechanism with
    mu = sensitivity / sigma (Balle & Wang 2018, Thm 8), evaluated with scipy where it does not underflow,
    inside the window |eps| < mu^2/2 + 14 mu (beyond it log_delta returns its stated upper bound)."""
    for mu in (0.2, 1.0, 3.0):
        g = Composed(mu, _POINT)
        for eps in (0.0, 0.1, 0.5, 1.0, 2.0, 4.0):
            want = stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)
            if want > 1e-250 and eps < mu * mu / 2 + 14 * mu:
                assert math.isclose(g.delta(eps), want, rel_tol=1e-9), (mu, eps)
