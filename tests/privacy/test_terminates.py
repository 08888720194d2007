"""Every public function of app.privacy terminates on every float (issue 26, item 1).

Hypothesis draws epsilon, delta, sigma, mu, ... over the whole double range on a log scale
(5e-324 .. 1.8e308), plus 0, -0, subnormals, the largest double, inf, -inf and nan. Each call must
return or raise PrivacyInputError naming a parameter, within the per-example deadline (200 ms);
anything else (another exception, a hang) fails. Where a value comes back it keeps the guarantee's
direction: a calibrated epsilon never exceeds its target, a solved mu / sigma is checked against an
independent evaluation of the GDP curve where double precision resolves it.

A watchdog (SIGALRM, 5 s) turns a hang into a failure instead of blocking the suite: on the old
solvers ``gdp_mu(1e-17, 1e-17)`` never returned.
"""

from __future__ import annotations

import contextlib
import math
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st
from scipy import special

from app.privacy import (
    ClipSoftmaxEvent,
    ExponentialMechanismEvent,
    GaussianEvent,
    PrivacyInputError,
    PureDPEvent,
    RdpAccountant,
    ZCDPEvent,
    accuracy_epsilon_bound,
    accuracy_to_epsilon,
    calibrate_clip_softmax,
    calibrate_gaussian,
    clip_softmax_em_epsilon,
    clip_softmax_rdp,
    clip_softmax_rho,
    epsilon_lower_bound,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_mu,
    gaussian_sigma_analytic,
    gaussian_sigma_classical,
    gdp_compose,
    gdp_delta,
    gdp_epsilon,
    gdp_mu,
    gdp_mu_from_rates,
    parse_orders,
    rdp_exponential_mechanism,
    rdp_gaussian,
    rdp_pure_dp,
    rdp_to_delta,
    rdp_to_epsilon,
    rdp_zcdp,
    service,
    translate_approx_dp,
    translate_gdp,
    translate_pure_dp,
    translate_zcdp,
)
from app.privacy._validate import MIN_EPSILON
from app.privacy.solve import MAX_FLOAT, largest_true, smallest_true
from app.privacy.subsampling import amplified_epsilon, deamplified_epsilon

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # overflow to inf is the intended answer

DEADLINE_MS = 200
FAST = settings(max_examples=150, deadline=DEADLINE_MS, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=40, deadline=DEADLINE_MS, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
GRID = parse_orders(None)

SPECIALS = [0.0, -0.0, 5e-324, 1e-320, 2.2250738585072014e-308, 1e-300, 1e-100, 1e-17, MIN_EPSILON, 1e-5, 0.5,
            1.0 - 2.0**-53, 1.0, 2.0, 1e15, 1e300, MAX_FLOAT, math.inf, -math.inf, math.nan, -1.0]


def log_uniform(lo_exp: float, hi_exp: float) -> st.SearchStrategy[float]:
    return st.floats(lo_exp, hi_exp).map(lambda e: 10.0**e)


# Any positive scale (epsilon, sigma, mu, rho, clip, temperature...) and any delta in (0, 1],
# each with the special values mixed in (those also test the refusals).
anyx = st.one_of(st.sampled_from(SPECIALS), log_uniform(-323.3, 308.25))
anyd = st.one_of(st.sampled_from(SPECIALS), log_uniform(-323.3, 0.0))
counts = st.one_of(st.sampled_from([0, 1, 2, 10**6, 10**15, -1]), st.integers(1, 10**9))


class Hang(Exception):
    pass


@contextlib.contextmanager
def watchdog(seconds: float = 5.0):
    def fire(signum, frame):
        raise Hang(f"no answer in {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, old)


def call(fn, /, *args, **kwargs):
    """fn's value, or None when it refused with PrivacyInputError naming a parameter."""
    shown = tuple("<orders>" if isinstance(a, np.ndarray) else a for a in args)
    note(f"{getattr(fn, '__name__', fn)}{shown!r} {kwargs!r}")
    with watchdog():
        try:
            return fn(*args, **kwargs)
        except PrivacyInputError as exc:
            assert exc.param, f"{fn.__name__} refused without naming a parameter: {exc}"
            return None


def _direct_log_delta(mu: float, eps: float) -> float | None:
    """log delta(eps; mu) by the plain formula (Dong, Roth & Su 2022, Cor. 2.13) where double
    precision resolves it (moderate mu and delta), else None."""
    if not (1e-3 <= mu <= 50.0 and eps <= 50.0):
        return None
    d = float(special.ndtr(-eps / mu + mu / 2.0) - math.exp(eps) * special.ndtr(-eps / mu - mu / 2.0))
    return math.log(d) if d > 1e-10 else None


# ---------------------------------------------------------------------------
# The solvers
# ---------------------------------------------------------------------------


@FAST
@given(anyx, anyd)
@example(1e-17, 1e-17).via("issue 26")
@example(1e-17, 1e-300).via("issue 26")
@example(1e-10, 1e-100).via("issue 26")
def test_gdp_mu_and_epsilon(eps, delta):
    mu = call(gdp_mu, eps, delta)
    if mu is None:
        return
    assert math.isfinite(mu) and mu >= 0.0
    ref = _direct_log_delta(mu, eps)
    if ref is not None:  # the guarantee direction: delta(eps; mu) <= delta
        assert ref <= math.log(delta) + 1e-9
    back = call(gdp_epsilon, mu, delta)
    assert back is None or (math.isfinite(back) and back >= 0.0)
    d = call(gdp_delta, mu, eps)
    assert d is not None and 0.0 <= d <= delta * (1 + 1e-12)


@FAST
@given(anyx, anyd)
def test_gdp_epsilon_any_mu(mu, delta):
    eps = call(gdp_epsilon, mu, delta)
    if eps is None:
        return
    assert math.isfinite(eps) and eps >= 0.0
    ref = _direct_log_delta(mu, eps)
    if ref is not None:  # never below the truth
        assert ref <= math.log(delta) + 1e-9


@FAST
@given(anyx, anyd, anyx, counts)
def test_gaussian_functions(x, delta, sens, k):
    for r in (call(gaussian_sigma_analytic, x, delta, sens, k), call(gaussian_sigma_classical, x, delta, sens)):
        if r is not None:
            sigma = r if isinstance(r, float) else r[0]
            assert math.isfinite(sigma) and sigma > 0.0
    e = call(gaussian_epsilon, x, delta, sens, k)
    assert e is None or (math.isfinite(e) and e >= 0.0)
    d = call(gaussian_delta, x, abs(delta), sens, k)
    assert d is None or 0.0 <= d <= 1.0
    m = call(gaussian_mu, x, sens, k)
    assert m is None or m >= 0.0
    call(gdp_compose, [x, sens])


@SLOW
@given(anyx, anyd, anyx, counts, st.sampled_from(["analytic", "rdp", "classical"]))
def test_calibrate_gaussian(target, delta, sens, k, method):
    cal = call(calibrate_gaussian, target, delta, sensitivity=sens, compositions=min(abs(k), 10**6) or 1,
               method=method)
    if cal is None:
        return
    assert target >= MIN_EPSILON
    assert math.isfinite(cal.value) and cal.value > 0.0
    assert 0.0 <= cal.epsilon <= target


@SLOW
@given(anyx, anyd, anyx, anyx, st.integers(1, 10**6), st.integers(1, 10**6),
       st.sampled_from(["temperature", "clip", "batch_size"]))
def test_calibrate_clip_softmax(target, delta, a, b, batch, k, solve_for):
    given_params = {"temperature": a, "clip": b, "batch_size": batch}
    given_params.pop(solve_for)
    cal = call(calibrate_clip_softmax, solve_for, target, delta, compositions=k, **given_params)
    if cal is None:
        return
    assert target >= MIN_EPSILON
    assert math.isfinite(cal.value) and cal.value > 0.0
    assert 0.0 <= cal.epsilon <= target


# ---------------------------------------------------------------------------
# Conversions, curves, the accountant and the empirical bounds
# ---------------------------------------------------------------------------


@FAST
@given(anyx, anyd, st.sampled_from(["mu", "rho"]))
def test_convert_back(eps, delta, to):
    r = call(service.convert, epsilon=eps, delta=delta, to=to)
    if r is not None:
        assert eps >= MIN_EPSILON and r[to] is not None and r[to] >= 0.0


@FAST
@given(st.sampled_from(["rho", "pure_epsilon", "mu", "sigma"]), anyx, anyd, anyx, st.booleans())
def test_convert_forward(source, x, delta, eps, to_delta):
    kw = {"epsilon": eps} if to_delta else {"delta": delta}
    r = call(service.convert, **{source: x}, **kw)
    if r is not None:
        assert r["epsilon"] is None or r["epsilon"] >= 0.0
        assert r["delta"] is None or 0.0 <= r["delta"] <= 1.0


@FAST
@given(anyx, anyx, anyd, counts)
def test_curves_and_translations(x, y, delta, k):
    for fn in (rdp_gaussian, rdp_zcdp, rdp_exponential_mechanism, rdp_pure_dp):
        args = (GRID, x, y) if fn is rdp_gaussian else (GRID, x)
        c = call(fn, *args)
        if c is not None:
            assert not np.any(np.isnan(c))
            call(rdp_to_epsilon, GRID, c, delta)
            call(rdp_to_delta, GRID, c, y)
    call(clip_softmax_rho, x, k, y)
    call(clip_softmax_em_epsilon, x, k, y)
    call(clip_softmax_rdp, GRID, x, k, y, k)
    for tr in (translate_pure_dp, translate_zcdp, translate_gdp):
        call(tr, x, "add-remove", "replace-one")
    call(translate_approx_dp, x, delta, "add-remove", "replace-one")
    call(amplified_epsilon, x, delta)
    call(deamplified_epsilon, x, delta)


@FAST
@given(st.lists(st.tuples(st.sampled_from(["gauss", "zcdp", "pure", "em", "clip"]), anyx, anyx,
                          st.integers(1, 10**6)), min_size=1, max_size=4), anyd, anyx)
def test_accountant_composition(events, delta, eps):
    acc = RdpAccountant()
    for kind, a, b, k in events:
        make = {
            "gauss": lambda: GaussianEvent(sigma=a, sensitivity=b, count=k),
            "zcdp": lambda: ZCDPEvent(a, count=k),
            "pure": lambda: PureDPEvent(a, count=k),
            "em": lambda: ExponentialMechanismEvent(a, count=k),
            "clip": lambda: ClipSoftmaxEvent(clip=a, batch_size=k, temperature=b),
        }[kind]
        ev = call(make)
        if ev is not None:
            call(acc.compose, ev)
    rep = call(acc.epsilon_report, delta)
    assert rep is None or not math.isnan(rep.epsilon)
    call(acc.get_delta, eps)
    if rep is not None:
        call(acc.privacy_cost, delta, "test")


@FAST
@given(counts, counts, counts, counts, anyd, anyd, anyx)
def test_empirical(tp, fn, fp, tn, confidence, delta, acc):
    call(epsilon_lower_bound, tp, fn, fp, tn, confidence, delta)
    call(accuracy_epsilon_bound, tp, tp + abs(fn), confidence, delta)
    call(accuracy_to_epsilon, acc, delta)
    call(gdp_mu_from_rates, confidence, delta)
    call(service.empirical, tp=tp, fn=fn, fp=fp, tn=tn, confidence=confidence, delta=delta)
    call(service.empirical, accuracy=confidence, trials=tp, confidence=0.95, delta=delta)


@SLOW
@given(anyx, anyd, st.sampled_from(["gaussian", "clip-softmax"]))
def test_service_calibrate(eps, delta, mech):
    extra = ({"solve_for": "sigma"} if mech == "gaussian"
             else {"solve_for": "temperature", "clip": 1.0, "batch_size": 10, "compositions": 100})
    r = call(service.calibrate, mechanism=mech, target_epsilon=eps, delta=delta, **extra)
    if r is not None:
        assert eps >= MIN_EPSILON and r["epsilon"] is not None and 0.0 <= r["epsilon"] <= eps


# ---------------------------------------------------------------------------
# The bisection itself, and the issue's repro in a fresh interpreter
# ---------------------------------------------------------------------------


@FAST
@given(log_uniform(-323.3, 308.25))
def test_bit_bisection_finds_the_exact_float(root):
    n = 0

    def below(x):
        nonlocal n
        n += 1
        return x <= root

    assert largest_true(below, 0.0, MAX_FLOAT) == root and n <= 64
    assert smallest_true(lambda x: x >= root, 0.0, MAX_FLOAT) == root


def test_issue_repro_returns_in_a_fresh_interpreter():
    code = textwrap.dedent("""
        from app.privacy.gdp import gdp_mu, gdp_epsilon
        from app.privacy import service
        for e, d in [(1e-17, 1e-17), (1e-17, 1e-300), (1e-10, 1e-100)]:
            gdp_epsilon(gdp_mu(e, d), d)
            service.convert(epsilon=max(e, 1e-12), delta=d, to="mu")
            service.calibrate(mechanism="gaussian", solve_for="sigma", target_epsilon=max(e, 1e-12), delta=d)
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


@pytest.mark.parametrize("eps", [5e-324, 1e-300, 1e-17, MIN_EPSILON / 2])
def test_tiny_targets_are_refused_with_the_reason(eps):
    for fn, kw in ((service.calibrate, dict(mechanism="gaussian", solve_for="sigma", target_epsilon=eps, delta=1e-5)),
                   (service.convert, dict(epsilon=eps, delta=1e-5, to="mu"))):
        with pytest.raises(PrivacyInputError) as ei:
            fn(**kw)
        assert ei.value.param in ("target_epsilon", "epsilon") and "vanishes in float64" in ei.value.message
