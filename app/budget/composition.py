"""Composition of the charges against one dataset's budget (pure math, no SQL).

Two valid routes, and the ledger reports the smaller (PRIOR_ART: for pure DP over
few steps RDP loses to basic composition):

* basic composition (Dwork & Roth 2014, Thm 3.16): sum of every charge's own
  (epsilon, delta);
* RDP composition (Mironov 2017, Prop. 1; ICLInf Thm C.7): RDP curves add; the sum
  is converted at the budget's delta (ICLInf Thm C.8 / Mironov, minimised over the
  order grid, ICLInf Alg. 2). Charges without an RDP curve are added by basic
  composition on top, with the delta they use taken off the conversion's delta.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from app.privacy.rdp import DEFAULT_ORDERS, convert_rdp, rdp_on_grid


@dataclass(frozen=True)
class Charge:
    """One answer's cost: its own (epsilon, delta) and, when known, its RDP curve."""

    epsilon: float
    delta: float
    orders: Sequence[float] | None = None
    rdp: Sequence[float] | None = None

    @property
    def has_curve(self) -> bool:
        return self.orders is not None and self.rdp is not None


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

    def __post_init__(self) -> None:
        self.orders = np.asarray(self.orders, dtype=float)
        if self.rdp_sum is None:
            self.rdp_sum = np.zeros_like(self.orders)
        self.rdp_sum = np.asarray(self.rdp_sum, dtype=float)

    def add(self, c: Charge) -> "BudgetState":
        """A new state with ``c`` composed in (self is unchanged)."""
        s = BudgetState(self.orders.copy(), self.rdp_sum.copy(), self.basic_epsilon, self.basic_delta,
                        self.nocurve_epsilon, self.nocurve_delta, self.charges + 1)
        s.basic_epsilon += float(c.epsilon)
        s.basic_delta += float(c.delta)
        if c.has_curve:
            s.rdp_sum = s.rdp_sum + rdp_on_grid(c.orders, c.rdp, s.orders)
        else:
            s.nocurve_epsilon += float(c.epsilon)
            s.nocurve_delta += float(c.delta)
        return s

    def rdp_json(self) -> list[float | None]:
        return [float(x) if math.isfinite(x) else None for x in self.rdp_sum]

    @staticmethod
    def rdp_from_json(values: Sequence[float | None]) -> np.ndarray:
        return np.array([math.inf if x is None else float(x) for x in values], dtype=float)


# The ledger's acceptance test (a relative slack for float sums such as 10 x 0.1 vs 1.0);
# the forecast uses the same test, so forecast and ledger agree to the last answer.
BUDGET_RTOL = 1e-12


def fits(spent: float, epsilon_budget: float) -> bool:
    """True when a composed spend is within the budget (the ledger's test, shared with the forecast)."""
    return spent <= epsilon_budget * (1 + BUDGET_RTOL)


def compose(state: BudgetState, delta_budget: float) -> tuple[float, str]:
    """(epsilon spent at ``delta_budget``, route) for the charges in ``state``."""
    if state.charges == 0:
        return 0.0, "none"
    basic = state.basic_epsilon if state.basic_delta <= delta_budget else math.inf
    rdp_eps = math.inf
    has_curves = state.nocurve_epsilon < state.basic_epsilon or bool(np.any(state.rdp_sum > 0))
    delta_left = delta_budget - state.nocurve_delta
    if has_curves and delta_left > 0:
        rdp_eps = convert_rdp(state.orders, state.rdp_sum, delta_left, "best").epsilon + state.nocurve_epsilon
    if rdp_eps < basic:
        return float(rdp_eps), "rdp"
    return float(basic), "basic"
