"""How many more answers fit in a budget if each costs what a given charge cost (pure math, no SQL).

Composition is the ledger's own (app.budget.composition.compose: the smaller of basic composition
and RDP composition converted at the budget's delta), so under RDP the forecast is more than
``remaining / epsilon_per_answer``: k further answers add k times the charge's RDP curve (Mironov
2017, Prop. 1) and the sum is converted once.
"""

from __future__ import annotations

import math

import numpy as np

from app.budget.composition import BudgetState, Charge, compose

CAP = 1_000_000  # forecasts beyond this are reported as ">= CAP"


def _k_more(state: BudgetState, c: Charge, k: int) -> BudgetState:
    s = BudgetState(state.orders.copy(), state.rdp_sum.copy(), state.basic_epsilon + k * c.epsilon,
                    state.basic_delta + k * c.delta, state.nocurve_epsilon, state.nocurve_delta, state.charges + k)
    if c.has_curve:
        s.rdp_sum = s.rdp_sum + k * np.asarray(c.rdp, dtype=float)
    else:
        s.nocurve_epsilon += k * c.epsilon
        s.nocurve_delta += k * c.delta
    return s


def answers_remaining(state: BudgetState, charge: Charge, epsilon_budget: float, delta_budget: float,
                      cap: int = CAP) -> int:
    """The largest k <= cap such that k more answers of cost ``charge`` keep the composed epsilon
    within ``epsilon_budget`` (the ledger's acceptance test, with its 1e-12 relative slack).
    ``charge.rdp`` must be on ``state.orders`` (ledger entries store it so)."""
    if not math.isfinite(charge.epsilon) or charge.epsilon <= 0:
        return 0 if not math.isfinite(charge.epsilon) else cap

    def fits(k: int) -> bool:
        spent, _ = compose(_k_more(state, charge, k), delta_budget)
        return spent <= epsilon_budget * (1 + 1e-12)

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= cap and fits(hi):  # composed spend grows with k: exponential then binary search
        lo, hi = hi, hi * 2
    if hi > cap:
        return cap if fits(cap) else _bisect(fits, lo, cap)
    return _bisect(fits, lo, hi)


def _bisect(fits, lo: int, hi: int) -> int:
    """lo fits, hi does not: the largest fitting k."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo
