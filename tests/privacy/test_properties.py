"""Hypothesis property tests: monotonicity of epsilon, and calibration never above target."""

from __future__ import annotations

import math

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from app.privacy import (
    calibrate_clip_softmax,
    calibrate_gaussian,
    clip_softmax_rdp,
    convert_rdp,
    gdp_epsilon,
    parse_orders,
)

GRID = parse_orders(None)
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)
TOL = 1e-9  # float noise in the minimum over orders

clip = st.floats(0.01, 50.0)
batch = st.integers(1, 2000)
temp = st.floats(0.01, 100.0)
comps = st.integers(1, 100_000)
delta = st.floats(1e-12, 0.5)
factor = st.floats(1.001, 10.0)


def eps(c, s, tau, k, d):
    return convert_rdp(GRID, clip_softmax_rdp(GRID, c, s, tau, k), d).epsilon


@SETTINGS
@given(clip, batch, temp, comps, delta, st.integers(1, 1000))
def test_epsilon_grows_with_compositions(c, s, tau, k, d, extra):
    assert eps(c, s, tau, k, d) <= eps(c, s, tau, k + extra, d) + TOL


@SETTINGS
@given(clip, batch, temp, comps, delta, factor)
def test_epsilon_grows_with_clip(c, s, tau, k, d, f):
    assert eps(c, s, tau, k, d) <= eps(c * f, s, tau, k, d) + TOL


@SETTINGS
@given(clip, batch, temp, comps, delta, factor)
def test_epsilon_falls_with_temperature(c, s, tau, k, d, f):
    assert eps(c, s, tau * f, k, d) <= eps(c, s, tau, k, d) + TOL


@SETTINGS
@given(clip, batch, temp, comps, delta, st.integers(1, 1000))
def test_epsilon_falls_with_batch_size(c, s, tau, k, d, extra):
    assert eps(c, s + extra, tau, k, d) <= eps(c, s, tau, k, d) + TOL


@SETTINGS
@given(clip, batch, temp, comps, delta, factor)
def test_epsilon_falls_with_delta(c, s, tau, k, d, f):
    assume(d * f < 1.0)
    assert eps(c, s, tau, k, d * f) <= eps(c, s, tau, k, d) + TOL


@SETTINGS
@given(st.floats(0.01, 20.0), delta, factor)
def test_gdp_epsilon_monotone(mu, d, f):
    assert gdp_epsilon(mu, d) <= gdp_epsilon(mu * f, d) + TOL
    assume(d * f < 1.0)
    assert gdp_epsilon(mu, d * f) <= gdp_epsilon(mu, d) + TOL


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    st.sampled_from(["temperature", "clip", "batch_size"]),
    st.floats(0.05, 200.0),
    st.floats(1e-10, 0.1),
    clip, batch, temp, st.integers(1, 50_000),
    st.sampled_from(["add-remove", "replace-one"]),
)
def test_calibration_never_above_target(solve_for, target, d, c, s, tau, k, adj):
    cal = calibrate_clip_softmax(solve_for, target, d, compositions=k, temperature=tau, clip=c, batch_size=s,
                                 adjacency=adj)
    assert cal.epsilon <= target
    p = cal.params
    recomputed = convert_rdp(GRID, clip_softmax_rdp(GRID, p["clip"], p["batch_size"], p["temperature"], k, adj), d)
    assert recomputed.epsilon <= target


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.floats(0.01, 50.0), st.floats(1e-10, 0.1), st.floats(0.1, 10.0), st.integers(1, 10_000),
       st.sampled_from(["analytic", "rdp"]))
def test_gaussian_calibration_never_above_target(target, d, sens, k, method):
    cal = calibrate_gaussian(target, d, sensitivity=sens, compositions=k, method=method)
    assert cal.epsilon <= target and math.isfinite(cal.value) and cal.value > 0
