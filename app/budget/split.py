"""The delta split of the ledger's PLD route (``app.budget.composition``), pure math.

A history of PLD-composed answers (the group, (e1, delta_1)-DP with delta_1 = delta_PLD(e1)) and
RDP-composed ones (the rest, converted at delta_2 = delta_left - delta_1) is charged

    min over e1 of  T(e1) = e1 + eps_RDP(rest, delta_left - delta_1(e1))

where eps_RDP is ``app.privacy.rdp.convert_rdp(..., "best")``: the minimum over the order grid of
the Balle et al. 2020 (Thm 21) and Mironov 2017 (Prop. 3) conversions. Every e1 gives a valid
bound, so the search only decides how tight the charge is, never whether it is valid.

Two searches, both returning T at an evaluated point (a valid bound):

* ``split_brent``: bounded Brent over e1 (the ledger's search of issue 30: about 40 scalar
  evaluations of delta_PLD, 2-3 ms). Used for groups with pure events (not charged by the ledger)
  and where the certified search's hypotheses fail.
* ``split_gaussian``: for a Gaussian-only group (mu-GDP, the ledger's case). Swap the two minima:
  min_e1 T = min over orders alpha of min_e1 phi_alpha(e1), with
  phi_alpha(e1) = e1 + max(C_alpha - log(delta_left - delta_1(e1)) / (alpha - 1), 0), C_alpha the
  smaller of the two conversions' constants (both have the same -log(delta)/(alpha - 1) term).
  Each phi_alpha is convex on the feasible e1 >= mu^2/2: the mu-GDP curve
  delta(e) = Phi(-e/mu + mu/2) - e^e Phi(-e/mu - mu/2) (Balle & Wang 2018, Thm 8) has
  delta''(e) = e^e [phi(z)/mu - (1 - Phi(z))], z = e/mu + mu/2, which is >= 0 when z >= mu (Mills'
  ratio, 1 - Phi(z) < phi(z)/z for z > 0), i.e. when e >= mu^2/2; then delta_left - delta_1 is concave
  and positive, -log of it convex, and max(convex, 0) + e convex. So the orders are searched all
  at once (numpy, one grid of e1 per order), each order's bracket is zoomed around its grid
  minimum (a convex function's minimum lies within one grid step of its sampled minimum), and an
  order is dropped once the convexity lower bound of its bracket, 2 T(x_j) - max(T(x_{j-1}), T(x_{j+1}))
  on a uniform grid (the secant lines bound a convex function from below outside their
  interval), or e_min + eps_RDP(delta_left) (delta_2 <= delta_left, e_min the last infeasible grid
  point), is not below the best value found minus ``CERT_TOL`` (or 16 ulps of that value, the
  float noise of T, where more). The result is within that of the true minimum over [mu^2/2, b],
  a bracket that contains Brent's, so it is never above Brent's result by more than that. Where the hypotheses do not hold (a history so
  small that e1 < mu^2/2 is feasible; an order whose Bretagnolle-Huber clamp, eps = 0 when
  sqrt(1 - e^-rdp) <= delta_2, can switch on inside the bracket; a budget delta below ~1e-35),
  the Brent search runs too and the smaller result is charged.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

from app.privacy.pld import Composed
from app.privacy.rdp import convert_rdp

SLACK = 1e-9  # delta_1 = delta_PLD(e1) * (1 + SLACK): float error never makes delta_1 too small
CERT_TOL = 2e-13  # the certified search stops within this of the minimum (or 16 ulps of it: ``_tol``)
# Points per grid (odd: each zoom re-evaluates its row's best point): the first grid, a zoom with more than
# MANY orders left, a zoom with fewer.
GRID, ZOOM_MANY, ZOOM, MANY, MAX_ZOOMS = 33, 17, 65, 16, 60


def _tol(best: float) -> float:
    """The certificate's tolerance: CERT_TOL, or 16 ulps of the value where that is more (float noise in T)."""
    return max(CERT_TOL, 16.0 * np.finfo(float).eps * abs(best)) if math.isfinite(best) else CERT_TOL


def split_brent(group: Composed, orders: np.ndarray, rest: np.ndarray, delta_left: float) -> float:
    """min over e1 of T(e1) by bounded Brent on [eps(0.999 delta_left), eps(1e-6 delta_left)] (any group)."""
    lo, hi = group.epsilon(delta_left * 0.999, rtol=1e-6), group.epsilon(delta_left * 1e-6, rtol=1e-6)

    def total(e1: float) -> float:
        d1 = group.delta(e1) * (1.0 + SLACK)
        if not d1 < delta_left:
            return math.inf
        return float(e1 + convert_rdp(orders, rest, delta_left - d1, "best").epsilon)

    best = min(total(lo), total(hi))
    if math.isfinite(lo) and math.isfinite(hi) and hi > lo:
        res = optimize.minimize_scalar(total, bounds=(lo, hi), method="bounded",
                                       options={"xatol": 1e-4 * max(1.0, hi), "maxiter": 30})
        best = min(best, float(res.fun))
    return best


class _Rows:
    """T(e1) for each order (a row) at many e1 at once, with ``convert_rdp``'s per-order formulas."""

    def __init__(self, group: Composed, orders: np.ndarray, rest: np.ndarray, delta_left: float) -> None:
        self.group, self.delta_left = group, delta_left
        self.rdp = np.asarray(rest, dtype=float)
        o = np.asarray(orders, dtype=float)
        self.b0 = self.rdp + np.log1p(-1.0 / o)  # Balle et al. 2020 Thm 21, as rdp._eps_bbghs
        self.log_o, self.inv = np.log(o), 1.0 / (o - 1.0)
        self.tv = np.expm1(-self.rdp)

    def at_delta_left(self) -> np.ndarray:
        """Each order's RDP epsilon at delta_2 = delta_left (a lower bound on its term: delta_2 <= delta_left)."""
        ld = math.log(self.delta_left)
        bb = np.where(self.delta_left ** 2 + self.tv > 0.0, 0.0, self.b0 - (ld + self.log_o) * self.inv)
        return np.minimum(np.maximum(bb, 0.0), np.maximum(self.rdp - ld * self.inv, 0.0))

    def values(self, e: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """T at points ``e`` (shape (len(rows), k) or (k,) for every row) for the orders ``rows``."""
        d1 = np.exp(self.group.log_delta_gaussian(e)) * (1.0 + SLACK)
        ok = d1 < self.delta_left
        d2 = np.where(ok, self.delta_left - d1, 1.0)
        ld = np.log(d2)
        r = rows[:, None]
        with np.errstate(invalid="ignore"):
            bb = self.b0[r] - (ld + self.log_o[r]) * self.inv[r]
            bb = np.maximum(np.where(d2 * d2 + self.tv[r] > 0.0, 0.0, bb), 0.0)
            mi = np.maximum(self.rdp[r] - ld * self.inv[r], 0.0)
        return np.where(ok, e + np.minimum(bb, mi), np.inf)


def certified_applies(group: Composed, rest: np.ndarray, delta_left: float) -> bool:
    """The hypotheses of ``split_gaussian``'s certificate (module docstring)."""
    if not group.gaussian_only or not delta_left > 1e-35:
        return False
    mu = group.mu
    # e1 < mu^2/2 infeasible (delta_PLD is decreasing, so checking mu^2/2 suffices).
    if float(np.exp(group.log_delta_gaussian(np.array([mu * mu / 2.0]))[0])) * (1.0 + SLACK) < delta_left:
        return False
    # No order's Bretagnolle-Huber clamp can switch on for any delta_2 < delta_left.
    return bool(np.all(-np.expm1(-np.asarray(rest, dtype=float)) >= delta_left * delta_left))


def split_gaussian(group: Composed, orders: np.ndarray, rest: np.ndarray, delta_left: float) -> tuple[float, bool]:
    """(min over e1 of T(e1), certified) for a Gaussian-only group; certified: within CERT_TOL of the minimum
    over [mu^2/2, b] (b: delta_PLD(b) <= 1e-9 delta_left, beyond Brent's bracket)."""
    mu = group.mu
    a = mu * mu / 2.0
    # delta_PLD(e) <= Phi(-e/mu + mu/2) (the subtracted term is >= 0): at b it is 1e-9 delta_left.
    b = a - mu * float(special.ndtri(1e-9 * delta_left))
    f = _Rows(group, orders, rest, delta_left)
    all_rows = np.arange(f.rdp.size)
    x = np.linspace(a, b, GRID)
    t = f.values(x, all_rows)  # (orders, GRID)
    best = float(np.min(t))
    j = np.argmin(t, axis=1)
    left, right = x[np.maximum(j - 1, 0)], x[np.minimum(j + 1, GRID - 1)]
    # Rows whose grid has no finite value are infeasible everywhere: nothing to search; rows whose convexity
    # lower bound is not below the best value already cannot improve it.
    tj = t[all_rows, j]
    with np.errstate(invalid="ignore"):
        lb0 = np.where((j > 0) & (j < GRID - 1), 2.0 * tj - np.maximum(t[all_rows, np.maximum(j - 1, 0)],
                                                                      t[all_rows, np.minimum(j + 1, GRID - 1)]),
                       -np.inf)
    # A second bound, whatever the grid: delta_2 <= delta_left, and e1 is at least the last infeasible grid point.
    feasible = np.isfinite(t).any(axis=0)  # rdp does not depend on e1: a finite row is finite wherever delta_1 fits
    e_min = float(x[np.argmax(feasible) - 1]) if bool(feasible.any()) and not bool(feasible[0]) else a
    lb0 = np.maximum(lb0, e_min + f.at_delta_left())
    active = np.isfinite(tj) & ~(lb0 >= best - _tol(best))
    rows, left, right = all_rows[active], left[active], right[active]
    u_many, u_few = np.linspace(0.0, 1.0, ZOOM_MANY), np.linspace(0.0, 1.0, ZOOM)
    certified = True
    for _ in range(MAX_ZOOMS):
        if rows.size == 0:
            break
        u = u_many if rows.size > MANY else u_few  # many rows left: a coarser zoom (cost ~ rows x points)
        zoom = u.size
        pts = left[:, None] + (right - left)[:, None] * u[None, :]
        t = f.values(pts, rows)
        k = np.argmin(t, axis=1)
        idx = np.arange(rows.size)
        tk = t[idx, k]
        best = min(best, float(np.min(tk)))
        inner = (k > 0) & (k < zoom - 1)
        with np.errstate(invalid="ignore"):
            lb = np.where(inner, 2.0 * tk - np.maximum(t[idx, np.maximum(k - 1, 0)],
                                                       t[idx, np.minimum(k + 1, zoom - 1)]), -np.inf)
        width = right - left
        tiny = width <= 1e-15 * np.maximum(1.0, np.abs(right))
        tol = _tol(best)
        keep = ~(lb >= best - tol) & ~tiny
        certified = certified and not bool(np.any(tiny & ~(lb >= best - tol)))
        rows, left, right, pts, k = rows[keep], left[keep], right[keep], pts[keep], k[keep]
        idx = np.arange(rows.size)
        left, right = pts[idx, np.maximum(k - 1, 0)], pts[idx, np.minimum(k + 1, zoom - 1)]
    else:
        certified = False
    return best, certified


def split(group: Composed, orders: np.ndarray, rest: np.ndarray, delta_left: float) -> float:
    """The charged split: the certified search where it applies, else (or when it does not certify) the smaller
    of it and Brent's."""
    if certified_applies(group, rest, delta_left):
        best, ok = split_gaussian(group, orders, rest, delta_left)
        return best if ok and math.isfinite(best) else min(best, split_brent(group, orders, rest, delta_left))
    if group.gaussian_only:
        return min(split_gaussian(group, orders, rest, delta_left)[0], split_brent(group, orders, rest, delta_left))
    return split_brent(group, orders, rest, delta_left)


__all__ = ["CERT_TOL", "SLACK", "certified_applies", "split", "split_brent", "split_gaussian"]
