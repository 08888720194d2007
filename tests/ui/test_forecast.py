"""count_answers (the forecast the dashboard shows) against the ledger's own acceptance test, one answer at a time."""

from __future__ import annotations

import math

import pytest

from app.budget.composition import BudgetState, Charge, compose
from app.budget.forecast import count_answers
from app.privacy.rdp import DEFAULT_ORDERS


def _one_by_one(state: BudgetState, c: Charge, eps_budget: float, delta_budget: float) -> int:
    n = 0
    while True:
        nxt = state.add(c)
        if not compose(nxt, delta_budget)[0] <= eps_budget * (1 + 1e-12):
            return n
        state, n = nxt, n + 1


GAUSS = [0.05 * a for a in DEFAULT_ORDERS]  # a Gaussian mechanism's RDP curve, rho = Delta^2 / (2 sigma^2) = 0.05


@pytest.mark.parametrize("charge, spent_before, budget", [
    (Charge(1.0, 0.0), 0, 8.0),                                        # pure DP: basic composition, exactly 8
    (Charge(0.7, 0.0), 3, 8.0),
    (Charge(1.2, 1e-6, DEFAULT_ORDERS, GAUSS), 0, 8.0),                # RDP beats basic: more than 8 / 1.2
    (Charge(1.2, 1e-6, DEFAULT_ORDERS, GAUSS), 10, 8.0),
    (Charge(2.0, 0.0), 0, 1.0),                                        # the first answer does not fit
])
def test_forecast_is_the_ledgers_one_by_one_count(charge, spent_before, budget):
    state = BudgetState()
    for _ in range(spent_before):
        state = state.add(charge)
    want = _one_by_one(state, charge, budget, 1e-5)
    assert count_answers(state, charge, budget, 1e-5).answers == want
    if charge.has_curve and spent_before == 0:
        assert want > math.floor(budget / charge.epsilon)  # composed, not summed


def test_forecast_is_capped():
    n = count_answers(BudgetState(), Charge(1e-9, 0.0), 8.0, 1e-5, limit=1000)
    assert n.answers == 1000 and n.capped
