"""Pure-epsilon (Laplace) answers stay on the ledger's RDP / basic routes: no valid fully adaptive filter we
know of allows more of them (docs/budget.md, "Pure-epsilon answers"). The counts of the table there, from the
filters' closed forms against the ledger's own forecast, which equals what the ledger accepts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from app.budget.composition import BudgetState
from app.budget.forecast import count_answers
from app.budget.ledger import charge_of
from app.mechanisms.rnm import RNM
from app.privacy.accountant import PrivacyCost

EPS_BUDGET, DELTA = 8.0, 1e-5


def _largest(ok) -> int:
    k = 0
    while ok(k + 1):
        k += 1
    return k


def _advanced_filter(eps: float) -> int:
    """Whitehouse, Ramdas, Rogers & Wu 2023 (advanced composition as a filter), in the form most favourable to it:
    sqrt(2 log(1/delta) sum eps^2) + sum eps tanh(eps/2) <= budget."""
    return _largest(lambda k: math.sqrt(2 * math.log(1 / DELTA) * k * eps * eps) + k * eps * math.tanh(eps / 2)
                    <= EPS_BUDGET)


def _gdp_filter(eps: float) -> int:
    """Smith & Thakurta 2022 (GDP filter) after eps-DP => mu-GDP, mu = 2 Phi^-1(e^eps / (1 + e^eps))."""
    mu1 = 2 * float(special.ndtri(math.exp(eps) / (1 + math.exp(eps))))
    a = np.linspace(1e-9, 1 - 1e-9, 100_001)  # mu1-GDP holds: G_mu1 below the eps-DP trade-off curve
    assert np.all(special.ndtr(special.ndtri(1 - a) - mu1)
                  <= np.maximum.reduce([0 * a, 1 - math.exp(eps) * a, math.exp(-eps) * (1 - a)]) + 1e-12)

    def eps_at(mu: float) -> float:
        lo, hi = 0.0, 10 * mu * mu + 50
        for _ in range(200):
            mid = (lo + hi) / 2
            d = special.ndtr(-mid / mu + mu / 2) - math.exp(mid) * special.ndtr(-mid / mu - mu / 2)
            lo, hi = (mid, hi) if d > DELTA else (lo, mid)
        return hi

    return _largest(lambda k: eps_at(math.sqrt(k) * mu1) <= EPS_BUDGET)


@pytest.mark.parametrize("eps, ledger, advanced, gdp", [(1.0, 8, 2, 1), (0.5, 16, 8, 7), (0.25, 44, 33, 28),
                                                        (0.1, 250, 209, 176)])
def test_no_valid_pure_filter_beats_the_ledger(eps, ledger, advanced, gdp):
    cost = PrivacyCost.from_dict(RNM().cost({"epsilon": eps, "noise": "laplace", "partitions": 4,
                                             "adjacency": "replace-one"}))
    assert count_answers(BudgetState(), charge_of(cost), EPS_BUDGET, DELTA).answers == ledger
    assert _advanced_filter(eps) == advanced < ledger
    assert _gdp_filter(eps) == gdp < ledger
