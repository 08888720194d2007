"""The delta split of the ledger's PLD route (app/budget/split.py): the certified search against the
Brent search the ledger used before (never more than it), a brute-force fine grid (within the grid's own
convexity bound of it), and its hypotheses (the convexity of the mu-GDP delta curve, the fallbacks)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special

from app.budget.composition import BudgetState, Charge, compose
from app.budget.forecast import repeat
from app.budget.split import CERT_TOL, certified_applies, split, split_brent, split_gaussian
from app.privacy.accountant import (ClipSoftmaxEvent, ExponentialMechanismEvent, GaussianEvent, PureDPEvent,
                                    RdpAccountant)
from app.privacy.pld import compose_counts
from app.privacy.rdp import convert_rdp

SENS = math.sqrt(2.0)  # rnm's L2 sensitivity under replace-one


def _charge(ev) -> Charge:
    acc = RdpAccountant(adjacency="replace-one").compose(ev)
    spec = ev.pld_spec(acc.adjacency)
    eps = acc.get_epsilon(1e-5)
    return Charge(eps, 1e-5 if isinstance(ev, GaussianEvent) else 0.0, acc.orders, acc.rdp, spec)


def _event(kind: str, p: float):
    if kind == "gaussian":
        return GaussianEvent(sigma=SENS / p, sensitivity=SENS)
    if kind == "laplace":  # pure eps-DP: RDP group in the ledger (PLD_LEDGER_KINDS)
        return PureDPEvent(p)
    if kind == "em":
        return ExponentialMechanismEvent(p)
    return ClipSoftmaxEvent(clip=p, batch_size=8, temperature=1.0)


def _state(hist) -> BudgetState:
    s = BudgetState()
    for kind, p, k in hist:
        s = repeat(s, _charge(_event(kind, p)), k)
    return s


def _parts(s: BudgetState, delta: float):
    assert s.rest_rdp is not None
    return compose_counts(s.pld_counts), s.orders, s.rest_rdp, delta - s.nocurve_delta


def _brute(group, orders, rest, delta_left: float, n: int = 2001) -> tuple[float, float]:
    """(min of T on a uniform grid over Brent's bracket, widened; its convexity slack), T evaluated independently:
    delta from Balle & Wang's formula, eps_RDP from convert_rdp, point by point."""
    lo = group.epsilon(delta_left * 0.999, rtol=1e-6)
    hi = group.epsilon(delta_left * 1e-6, rtol=1e-6)
    mu = group.mu

    def t(e1: float) -> float:
        la = float(special.log_ndtr(-e1 / mu + mu / 2))  # in logs: e1 may be in the hundreds
        d = math.exp(la) * -math.expm1(min(e1 + float(special.log_ndtr(-e1 / mu - mu / 2)) - la, 0.0))
        d1 = d * (1 + 1e-9)
        return e1 + convert_rdp(orders, rest, delta_left - d1, "best").epsilon if d1 < delta_left else math.inf

    def grid(a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
        x = np.linspace(a, b, n)
        return x, np.array([t(float(e)) for e in x])

    x, v = grid(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    i = int(np.argmin(v))
    x, v = grid(float(x[max(i - 1, 0)]), float(x[min(i + 1, n - 1)]))  # the minimum lies here (convexity)
    i = int(np.argmin(v))
    assert 0 < i < n - 1
    # Convexity: the minimum is >= 2 v_i - max(v_{i-1}, v_{i+1}), so v_i is within this of it.
    return float(v[i]), float(max(v[i - 1], v[i + 1]) - v[i])


hist_st = st.lists(
    st.tuples(st.sampled_from(["gaussian", "laplace", "em", "clip"]), st.sampled_from([0.05, 0.1, 0.25, 0.5, 1.0]),
              st.integers(1, 2000)),
    min_size=2, max_size=5,
).filter(lambda h: any(k == "gaussian" for k, _, _ in h) and any(k != "gaussian" for k, _, _ in h))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(hist=hist_st, log_delta=st.floats(-10.0, -3.0))
def test_the_certified_split_is_never_above_brent_and_equals_a_fine_grid(hist, log_delta):
    delta = 10.0**log_delta
    group, orders, rest, dl = _parts(_state(hist), delta)
    assert group.gaussian_only
    new = split(group, orders, rest, dl)
    old = split_brent(group, orders, rest, dl)
    # Never more than the search the ledger used before (1e-12, relative where T is above 1: the float noise
    # of two evaluations of one T; histories here reach T ~ 1000, where one ulp is 1.1e-13).
    assert new <= old + 1e-12 * max(1.0, old)
    if certified_applies(group, rest, dl):
        got, certified = split_gaussian(group, orders, rest, dl)
        assert certified and got == new
        brute, slack = _brute(group, orders, rest, dl)
        # The grid's value is >= the true minimum >= brute - slack (convexity); ours is an evaluated T, so
        # >= the true minimum too (up to float noise), and within the certificate's tolerance of it.
        noise = 1e-12 * max(1.0, brute)
        assert brute - slack - noise <= new <= brute + max(CERT_TOL, 16 * 2.2e-16 * brute) + noise


@pytest.mark.parametrize("mu", [1e-3, 0.05, 0.3, 1.0, 3.0, 10.0])
def test_log_delta_gaussian_is_the_scalar_log_delta(mu):
    g = compose_counts({f"gaussian:{mu.hex()}": 1})
    c = mu * mu / 2 + 14 * mu
    e = np.concatenate([np.linspace(-c - 1, c + 1, 301), [0.0, mu * mu / 2, c, -c]])
    vec = g.log_delta_gaussian(e)
    ref = np.array([g.log_delta(float(x)) for x in e])
    assert np.array_equal(np.isfinite(vec), np.isfinite(ref))
    ok = np.isfinite(ref)
    assert np.allclose(vec[ok], ref[ok], rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("mu", [1e-3, 0.1, 1.0, 4.0, 20.0])
def test_the_gdp_delta_curve_is_convex_beyond_mu_squared_over_two(mu):
    """The certificate's premise: delta''(e) >= 0 for e >= mu^2/2 (Mills' ratio), checked by exact second
    differences of delta in 50-digit arithmetic, and the sign flip below mu^2/2 that makes it necessary."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50

    def d(e):
        e, m = mpmath.mpf(e), mpmath.mpf(mu)
        return mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2)

    h = mpmath.mpf(mu) * mpmath.mpf("1e-6")
    for e in np.linspace(mu * mu / 2, mu * mu / 2 + 10 * mu, 41):
        assert d(e + h) - 2 * d(e) + d(e - h) >= 0
    if mu >= 4.0:  # well below mu^2/2 the curve is concave: the hypothesis is needed
        e = mu * mu / 4
        assert d(e + h) - 2 * d(e) + d(e - h) < 0


def test_a_tiny_gaussian_group_falls_back_and_keeps_the_smaller():
    # mu so small that e1 < mu^2/2 is feasible: outside the certificate, so Brent runs too.
    s = repeat(BudgetState(), _charge(_event("gaussian", 1e-6)), 1)
    s = repeat(s, _charge(_event("em", 0.5)), 3)
    group, orders, rest, dl = _parts(s, 1e-5)
    assert not certified_applies(group, rest, dl)
    assert split(group, orders, rest, dl) <= split_brent(group, orders, rest, dl)


def test_an_order_whose_tv_clamp_can_switch_on_falls_back():
    # A rest group with RDP below delta^2 at some order: the Bretagnolle-Huber clamp makes that order's term
    # jump to 0 inside the bracket, which the convexity certificate does not cover.
    s = repeat(BudgetState(), _charge(_event("gaussian", 0.5)), 20)
    s = repeat(s, _charge(_event("em", 1e-7)), 1)
    group, orders, rest, dl = _parts(s, 1e-3)
    assert not certified_applies(group, rest, dl)
    assert split(group, orders, rest, dl) <= split_brent(group, orders, rest, dl)


def test_the_ledger_route_uses_the_split_and_never_exceeds_rdp_alone():
    hist = [("gaussian", 0.5, 100), ("em", 0.1, 2)]
    s = _state(hist)
    old = BudgetState(s.orders, s.rdp_sum, s.basic_epsilon, s.basic_delta, s.nocurve_epsilon, s.nocurve_delta,
                      s.charges)  # no PLD group: the RDP-only ledger
    now, route = compose(s, 1e-5)
    group, orders, rest, dl = _parts(s, 1e-5)
    assert route == "pld+rdp" and now == split(group, orders, rest, dl) + s.nocurve_epsilon
    assert now <= split_brent(group, orders, rest, dl) + s.nocurve_epsilon + 1e-12
    assert now < compose(old, 1e-5)[0] - 0.3  # 6.83 vs 7.17 (docs/budget.md)
