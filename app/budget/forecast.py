"""Budget forecast: how many more identical answers a dataset's budget pays for, and the
largest per-answer epsilon for which N more answers fit (pure math, no SQL).

The forecast composes exactly as the ledger does (``app.budget.ledger.Ledger.charge``):
the same ``BudgetState.add`` arithmetic in the same order (one charge after another,
so floating-point sums are bit-identical), the same ``compose`` (the smallest of basic
composition, Dwork & Roth 2014 Thm 3.16, RDP composition, Mironov 2017 Prop. 1,
converted at the budget's delta, and PLD composition of the charges that have one) and the same acceptance test ``fits``. So "N answers
remaining" means: the next N identical charges are accepted and the (N+1)-th is
refused, provided nothing else is charged or refunded in between.

Both questions are monotone (each charge adds non-negative amounts to every sum, and
a larger per-answer epsilon gives a larger charge), so the count is found by galloping
then bisection on the count, and the epsilon by a geometric scan then bisection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from app.budget.composition import BudgetState, Charge, compose, fits
from app.privacy.rdp import rdp_on_grid

# Exact simulation is O(answers); beyond this the count is reported as "at least".
COUNT_LIMIT = 1_000_000
ANSWERS_LIMIT = 100_000


@dataclass(frozen=True)
class Count:
    answers: int  # identical answers that fit after the current state
    capped: bool  # True: at least ``answers`` (the simulation stopped at the limit)
    epsilon_spent_after: float  # composed spend after those answers (at the budget's delta)
    method: str  # composition route after those answers: rdp | basic | pld | pld+rdp | none


def repeat(state: BudgetState, charge: Charge, k: int) -> BudgetState:
    """``state.add(charge)`` applied ``k`` times, with the same floating-point operations in the
    same order (the curve is carried to the grid once: ``rdp_on_grid`` is deterministic; the PLD
    counts are integers)."""
    if k <= 0:
        return state
    grid = rdp_on_grid(charge.orders, charge.rdp, state.orders) if charge.has_curve else None
    assert state.rest_rdp is not None
    rdp, rest = state.rdp_sum.copy(), state.rest_rdp.copy()
    counts = dict(state.pld_counts)
    be, bd, ne, nd = state.basic_epsilon, state.basic_delta, state.nocurve_epsilon, state.nocurve_delta
    eps, dl = float(charge.epsilon), float(charge.delta)
    pld = charge.ledger_pld  # only the kinds the ledger composes by PLD (pure-epsilon answers stay on RDP)
    for _ in range(k):
        be += eps
        bd += dl
        if grid is not None:
            rdp = rdp + grid
            if pld is None:
                rest = rest + grid
        else:
            ne += eps
            nd += dl
    if pld is not None:
        counts[pld.key] = counts.get(pld.key, 0) + k * pld.count
    return BudgetState(state.orders.copy(), rdp, be, bd, ne, nd, state.charges + k, counts, rest)


def _ok(state: BudgetState, epsilon_budget: float, delta_budget: float) -> bool:
    return fits(compose(state, delta_budget)[0], epsilon_budget)


def count_answers(state: BudgetState, charge: Charge, epsilon_budget: float, delta_budget: float,
                  limit: int = COUNT_LIMIT) -> Count:
    """The largest n <= limit such that n more ``charge``s fit, as the ledger would accept them."""
    if not math.isfinite(charge.epsilon) or not _ok(state.add(charge), epsilon_budget, delta_budget):
        spent, method = compose(state, delta_budget)
        return Count(0, False, spent, method)
    lo, lo_state = 1, state.add(charge)  # fits
    hi = None
    while hi is None:  # gallop: 2, 4, 8, ... until one does not fit
        cand = min(2 * lo, limit)
        if cand == lo:
            spent, method = compose(lo_state, delta_budget)
            return Count(lo, True, spent, method)
        cand_state = repeat(lo_state, charge, cand - lo)
        if _ok(cand_state, epsilon_budget, delta_budget):
            lo, lo_state = cand, cand_state
        else:
            hi = cand
    while hi - lo > 1:  # invariant: lo fits, hi does not
        mid = (lo + hi) // 2
        mid_state = repeat(lo_state, charge, mid - lo)
        if _ok(mid_state, epsilon_budget, delta_budget):
            lo, lo_state = mid, mid_state
        else:
            hi = mid
    spent, method = compose(lo_state, delta_budget)
    return Count(lo, False, spent, method)


@dataclass(frozen=True)
class EpsilonFit:
    epsilon: float | None  # largest per-answer epsilon found (None: none fits)
    epsilon_refused: float | None  # a slightly larger epsilon at which the answers no longer fit
    evaluations: int


def largest_epsilon(answers: int, state: BudgetState, charge_for: Callable[[float], Charge | None],
                    epsilon_budget: float, delta_budget: float, *, rtol: float = 1e-6,
                    lowest: float | None = None, highest: float | None = None) -> EpsilonFit:
    """The largest per-answer epsilon e such that ``answers`` charges ``charge_for(e)`` fit.

    ``charge_for`` returns None where the mechanism cannot be configured at e (treated as not
    fitting). Scan e = budget * 2^j downwards from ``highest`` (default 64 x the budget: with RDP
    composition and a per-answer delta below the budget's, one answer's epsilon may exceed the
    total) to ``lowest`` (default 2^-40 x the budget), then bisect between the last fitting and
    the first refused value to relative width ``rtol``. The returned epsilon is one at which the
    exact simulation accepted every answer.
    """
    n_eval = 0

    def ok(e: float) -> bool:
        nonlocal n_eval
        n_eval += 1
        c = charge_for(e)
        if c is None or not math.isfinite(c.epsilon):
            return False
        return _ok(repeat(state, c, answers), epsilon_budget, delta_budget)

    top = highest if highest is not None else 64.0 * epsilon_budget
    bottom = lowest if lowest is not None else epsilon_budget * 2.0 ** -40
    refused: float | None = None
    e = top
    good: float | None = None
    while e >= bottom and e > 0.0:  # e > 0: a subnormal budget makes bottom 0, and 0 / 2 == 0
        if ok(e):
            good = e
            break
        refused = e
        e /= 2.0
    if good is None:
        return EpsilonFit(None, refused, n_eval)
    if refused is None:  # even the highest value tried fits
        return EpsilonFit(good, None, n_eval)
    lo, hi = good, refused
    while (hi - lo) > rtol * lo:
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:  # adjacent floats: nothing left to split
            break
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return EpsilonFit(lo, hi, n_eval)


def spend_after(state: BudgetState, charge: Charge, n: int, delta_budget: float) -> tuple[float, str]:
    return compose(repeat(state, charge, n), delta_budget)


__all__ = ["ANSWERS_LIMIT", "COUNT_LIMIT", "Count", "EpsilonFit", "count_answers", "largest_epsilon", "repeat",
           "spend_after"]
