"""Composition of the charges against one dataset's budget (pure math, no SQL).

Two valid routes, and the ledger reports the smaller (PRIOR_ART: for pure DP over
few steps RDP loses to basic composition):

* basic composition (Dwork & Roth 2014, Thm 3.16): sum of every charge's own
  (epsilon, delta);
* RDP composition (Mironov 2017, Prop. 1; ICLInf Thm C.7): RDP curves add; the sum
  is converted at the budget's delta (ICLInf Thm C.8 / Mironov, minimised over the
  order grid, ICLInf Alg. 2). Charges without an RDP curve are added by basic
  composition on top, with the delta they use taken off the conversion's delta.

and, when some charges are Gaussian (an exact dominating pair, ``app.privacy.pld``), a third: those
charges composed by their privacy loss distribution (for Gaussians: mu-GDP with mu^2 the sum of the
mu_i^2, Dong, Roth & Su 2022 Cor. 3.3) at
delta_1, the other curves by RDP at delta_2 and the curveless ones by basic composition, with
delta_1 + delta_2 + (their delta) = the budget's delta and the epsilons added (basic composition
of the two groups, valid also when their answers interleave: Vadhan & Wang 2021, concurrent
composition; Dwork & Roth 2014 Thm 3.16); the split is optimised (``app.budget.split``). The ledger charges the smallest
of the three (each is a valid upper bound): never more than RDP alone. See docs/budget.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from app.budget.split import split
from app.lru import LRU
from app.privacy.pld import HistoryTooLarge, PldSpec, compose_counts
from app.privacy.rdp import DEFAULT_ORDERS, convert_rdp, rdp_on_grid

# Which dominating pairs the *ledger* composes by PLD. The ledger is a privacy filter: each answer's epsilon is
# chosen after earlier answers were seen, and it stops at the budget. For Gaussian answers that is proven
# (fully adaptive GDP composition: Smith & Thakurta 2022, Thm 1.1; mu^2 sums). For pure-epsilon answers of
# different, adaptively chosen epsilons we know of no such proof for PLD composition, so they stay on the RDP /
# basic routes (valid filters: Feldman & Zrnic 2021; Rogers et al. 2016). app.privacy.pld still composes
# pure pairs for callers with a fixed, non-adaptive sequence.
PLD_LEDGER_KINDS = frozenset({"gaussian"})


@dataclass(frozen=True)
class Charge:
    """One answer's cost: its own (epsilon, delta) and, when known, its RDP curve."""

    epsilon: float
    delta: float
    orders: Sequence[float] | None = None
    rdp: Sequence[float] | None = None
    pld: PldSpec | None = None  # only together with a curve (the RDP route still needs one)

    @property
    def has_curve(self) -> bool:
        return self.orders is not None and self.rdp is not None

    @property
    def ledger_pld(self) -> PldSpec | None:
        """The pair the ledger composes by PLD: one of ``PLD_LEDGER_KINDS``, with a curve; else None (RDP group).
        The one test for ``BudgetState.add`` and the forecast's ``repeat``, so they agree to the last answer."""
        if self.has_curve and self.pld is not None and self.pld.kind in PLD_LEDGER_KINDS:
            return self.pld
        return None


@dataclass
class BudgetState:
    """Running sums for one account (what the budget_accounts row stores)."""

    orders: np.ndarray = field(default_factory=lambda: np.array(DEFAULT_ORDERS))
    rdp_sum: np.ndarray | None = None
    basic_epsilon: float = 0.0
    basic_delta: float = 0.0
    nocurve_epsilon: float = 0.0
    nocurve_delta: float = 0.0
    charges: int = 0
    # The PLD route: counts per event type of the charges with a dominating pair, and the RDP sum
    # of the other curves (None: every curve so far is such an other one -- accounts from before).
    pld_counts: dict[str, int] = field(default_factory=dict)
    rest_rdp: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.orders = np.asarray(self.orders, dtype=float)
        if self.rdp_sum is None:
            self.rdp_sum = np.zeros_like(self.orders)
        self.rdp_sum = np.asarray(self.rdp_sum, dtype=float)
        self.rest_rdp = self.rdp_sum.copy() if self.rest_rdp is None else np.asarray(self.rest_rdp, dtype=float)
        self.pld_counts = {str(k): int(n) for k, n in self.pld_counts.items()}

    def copy(self) -> "BudgetState":
        assert self.rdp_sum is not None and self.rest_rdp is not None
        return BudgetState(self.orders.copy(), self.rdp_sum.copy(), self.basic_epsilon, self.basic_delta,
                           self.nocurve_epsilon, self.nocurve_delta, self.charges, dict(self.pld_counts),
                           self.rest_rdp.copy())

    def add(self, c: Charge) -> "BudgetState":
        """A new state with ``c`` composed in (self is unchanged)."""
        s = self.copy()
        s.charges += 1
        s.basic_epsilon += float(c.epsilon)
        s.basic_delta += float(c.delta)
        if c.has_curve:
            curve = rdp_on_grid(c.orders, c.rdp, s.orders)
            s.rdp_sum = s.rdp_sum + curve
            pld = c.ledger_pld
            if pld is not None:
                s.pld_counts[pld.key] = s.pld_counts.get(pld.key, 0) + pld.count
            else:
                s.rest_rdp = s.rest_rdp + curve
        else:
            s.nocurve_epsilon += float(c.epsilon)
            s.nocurve_delta += float(c.delta)
        return s

    def rdp_json(self) -> list[float | None]:
        return [float(x) if math.isfinite(x) else None for x in self.rdp_sum]

    def rest_json(self) -> list[float | None]:
        assert self.rest_rdp is not None
        return [float(x) if math.isfinite(x) else None for x in self.rest_rdp]

    @staticmethod
    def rdp_from_json(values: Sequence[float | None]) -> np.ndarray:
        return np.array([math.inf if x is None else float(x) for x in values], dtype=float)


# The ledger's acceptance test (a relative slack for float sums such as 10 x 0.1 vs 1.0);
# the forecast uses the same test, so forecast and ledger agree to the last answer.
BUDGET_RTOL = 1e-12


def fits(spent: float, epsilon_budget: float) -> bool:
    """True when a composed spend is within the budget (the ledger's test, shared with the forecast)."""
    return spent <= epsilon_budget * (1 + BUDGET_RTOL)


_MEMO_SIZE = 256
_MEMO = LRU(_MEMO_SIZE)  # _memo_key -> compose's (epsilon, route)


def _memo_key(state: BudgetState, delta_budget: float) -> bytes:
    """Every input of :func:`compose`, as bytes: equal keys are bit-identical inputs."""
    assert state.rdp_sum is not None and state.rest_rdp is not None
    scalars = np.array([state.basic_epsilon, state.basic_delta, state.nocurve_epsilon, state.nocurve_delta,
                        float(state.charges), float(delta_budget)], dtype=float)
    counts = repr(sorted(state.pld_counts.items())).encode()
    return b"|".join((scalars.tobytes(), state.orders.tobytes(), state.rdp_sum.tobytes(),
                      state.rest_rdp.tobytes(), counts))


def compose(state: BudgetState, delta_budget: float) -> tuple[float, str]:
    """(epsilon spent at ``delta_budget``, route) for the charges in ``state``.

    A pure function of its inputs, remembered for the last few distinct inputs (bit-identical key):
    an answer's precheck and its charge compose the same state when no other charge came between
    them, and the PLD route's root finding costs ~1-2 ms per call (issue 27)."""
    key = _memo_key(state, delta_budget)
    hit = _MEMO.get(key)
    if hit is not None:
        return hit
    out = _compose(state, delta_budget)
    _MEMO.put(key, out)
    return out


def _compose(state: BudgetState, delta_budget: float) -> tuple[float, str]:
    if state.charges == 0:
        return 0.0, "none"
    basic = state.basic_epsilon if state.basic_delta <= delta_budget else math.inf
    rdp_eps = math.inf
    has_curves = state.nocurve_epsilon < state.basic_epsilon or bool(np.any(state.rdp_sum > 0))
    delta_left = delta_budget - state.nocurve_delta
    if has_curves and delta_left > 0:
        rdp_eps = convert_rdp(state.orders, state.rdp_sum, delta_left, "best").epsilon + state.nocurve_epsilon
    best, route = (float(rdp_eps), "rdp") if rdp_eps < basic else (float(basic), "basic")
    if state.pld_counts and delta_left > 0:
        pld_eps, pld_route = _pld_route(state, delta_left)
        if pld_eps < best:
            return pld_eps, pld_route
    return best, route


def _pld_route(state: BudgetState, delta_left: float) -> tuple[float, str]:
    """The PLD group at delta_1 + the other curves by RDP at delta_left - delta_1 + the curveless
    charges by basic composition; the split optimised (``app.budget.split``: any split is valid)."""
    assert state.rest_rdp is not None
    try:
        group = compose_counts(state.pld_counts)
    except HistoryTooLarge:  # mu overflows (an answer at epsilon 1e308): no finite bound on this route; was a 500
        return math.inf, "pld"
    if not bool(np.any(state.rest_rdp > 0)):
        return float(group.epsilon(delta_left) + state.nocurve_epsilon), "pld"
    return split(group, state.orders, state.rest_rdp, delta_left) + state.nocurve_epsilon, "pld+rdp"
