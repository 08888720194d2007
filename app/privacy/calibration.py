"""Calibration: solve a mechanism parameter so that epsilon at delta is at most a target.

Bisection as in ICLInf Algorithm 3 (and its clip / batch-size variants, ICLInf
E.2), with two changes that make the guarantee hold by construction:

* the answer is the end of the final bracket on the *feasible* side
  (Algorithm 3 returns the midpoint, which can sit just above the target);
* the bracket is found by geometric expansion and checked, so an
  unreachable target is reported instead of silently returning a bound.

Each step converts the composed RDP curve with ICLInf Algorithm 2 (minimum
over the order grid), using the smaller of the BBGHS and Mironov conversions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.privacy import _validate as v
from app.privacy.adjacency import Adjacency
from app.privacy.clip_softmax import _rdp_per_token, _sensitivity
from app.privacy.errors import PrivacyInputError
from app.privacy.gaussian import (
    gaussian_epsilon,
    gaussian_sigma_analytic,
    gaussian_sigma_classical,
)
from app.privacy.rdp import convert_rdp, parse_orders
from app.privacy.solve import tick

_LO, _HI = 1e-12, 1e15  # default search range for continuous parameters
_MAX_BATCH = 10**15


@dataclass(frozen=True)
class Calibration:
    """A solved parameter, the order alpha that gave the bound (None for exact Gaussian
    calibrations) and the achieved epsilon (always <= target_epsilon)."""

    parameter: str
    value: float
    alpha: float | None
    epsilon: float
    delta: float
    target_epsilon: float
    method: str
    iterations: int
    params: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


EpsFn = Callable[[float], "tuple[float, float | None, str]"]


def _bounds(lower: float | None, upper: float | None, param: str) -> tuple[float, float]:
    lo = _LO if lower is None else v.positive(lower, "lower")
    hi = _HI if upper is None else v.positive(upper, "upper")
    if not lo < hi:
        raise PrivacyInputError(f"search bounds for {param} must satisfy lower < upper", param="lower")
    return lo, hi


def _solve_continuous(
    eps_of: EpsFn,
    target: float,
    *,
    increasing: bool,
    lo: float,
    hi: float,
    guess: float | None,
    name: str,
    rtol: float,
    max_iter: int = 400,
) -> tuple[float, tuple[float, float | None, str], int]:
    """Solve eps_of(p) <= target for p in [lo, hi], eps monotone in p.

    increasing=True: epsilon grows with p, answer = largest feasible p.
    increasing=False: epsilon falls with p, answer = smallest feasible p.
    Returns (p, eps_of(p), iterations); eps_of(p)[0] <= target always.
    """
    def feasible(r: tuple[Any, ...]) -> bool:
        tick()  # every evaluation is a step: a job's cancel takes effect here
        return r[0] <= target

    safe_end, other_end = (lo, hi) if increasing else (hi, lo)
    r_safe = eps_of(safe_end)
    if not feasible(r_safe):
        raise PrivacyInputError(
            f"target unreachable: epsilon is {r_safe[0]:.6g} > target even at {name} = {safe_end:g}"
            " (widen the search bounds or relax the target)",
            param="target_epsilon",
        )
    r_other = eps_of(other_end)
    if feasible(r_other):  # the whole range meets the target: take its most useful end
        return other_end, r_other, 0
    # Geometric expansion from the guess narrows the bracket before bisection.
    f_p, f_r = safe_end, r_safe  # feasible side
    i_p = other_end  # infeasible side
    it = 0
    if guess is not None and lo < guess < hi:
        g = float(guess)
        r = eps_of(g)
        it += 1
        if feasible(r):
            f_p, f_r = g, r
            step = 4.0 if increasing else 0.25
            while it < max_iter:
                nxt = g * step
                if not lo < nxt < hi:
                    break
                r = eps_of(nxt)
                it += 1
                if feasible(r):
                    f_p, f_r, g = nxt, r, nxt
                else:
                    i_p = nxt
                    break
        else:
            i_p = g
            step = 0.25 if increasing else 4.0
            while it < max_iter:
                nxt = g * step
                if not lo < nxt < hi:
                    break
                r = eps_of(nxt)
                it += 1
                if feasible(r):
                    f_p, f_r = nxt, r
                    break
                i_p, g = nxt, nxt
    # Bisection in log space (parameters span many decades).
    while it < max_iter and abs(i_p / f_p - 1.0) > rtol:
        mid = math.sqrt(f_p) * math.sqrt(i_p)  # the product could underflow (1e-300 * 1e-30) or overflow
        if not (min(f_p, i_p) < mid < max(f_p, i_p)):
            break
        r = eps_of(mid)
        it += 1
        if feasible(r):
            f_p, f_r = mid, r
        else:
            i_p = mid
    return f_p, f_r, it


def _solve_integer_decreasing(
    eps_of: EpsFn, target: float, lo: int, hi: int, name: str
) -> tuple[int, tuple[float, float | None, str], int]:
    """Smallest integer n in [lo, hi] with eps_of(n) <= target, eps non-increasing in n."""
    r_lo = eps_of(lo)
    if r_lo[0] <= target:
        return lo, r_lo, 1
    it = 1
    f_n = max(lo + 1, 2 * lo)
    while True:
        f_n = min(f_n, hi)
        r = eps_of(f_n)
        it += 1
        if r[0] <= target:
            break
        if f_n >= hi:
            raise PrivacyInputError(
                f"target unreachable: epsilon is {r[0]:.6g} > target even at {name} = {hi}", param="target_epsilon"
            )
        lo, f_n = f_n, f_n * 2
        tick()
    i_n, f_r = lo, r  # i_n infeasible, f_n feasible
    while f_n - i_n > 1:
        tick()
        mid = (i_n + f_n) // 2
        r = eps_of(mid)
        it += 1
        if r[0] <= target:
            f_n, f_r = mid, r
        else:
            i_n = mid
    return f_n, f_r, it


# ---------------------------------------------------------------------------
# Clipped-logit softmax (ICLInf Algorithm 1)
# ---------------------------------------------------------------------------

CLIP_SOFTMAX_PARAMS = ("temperature", "clip", "batch_size")


def calibrate_clip_softmax(
    solve_for: str,
    target_epsilon: float,
    delta: float,
    *,
    compositions: int,
    temperature: float | None = None,
    clip: float | None = None,
    batch_size: int | None = None,
    orders: Any = None,
    adjacency: Adjacency | str = Adjacency.ADD_REMOVE,
    conversion: str = "best",
    lower: float | None = None,
    upper: float | None = None,
    rtol: float = 1e-10,
) -> Calibration:
    """Solve temperature, clip or batch size so that the composed clip-softmax RDP
    (ICLInf C.3.1) converts to epsilon <= target at delta (ICLInf Algorithm 3).

    Epsilon falls with temperature and batch size, grows with clip. The batch
    size is an integer, the smallest one that meets the target (rounded up).
    """
    key = solve_for.replace("-", "_")
    if key not in CLIP_SOFTMAX_PARAMS:
        raise PrivacyInputError(
            f"cannot solve for {solve_for!r} with clip-softmax; use temperature, clip or batch-size", param="solve_for"
        )
    target = v.target_epsilon(target_epsilon)
    d = v.delta_open(delta)
    k = v.count(compositions, "compositions", minimum=1)
    grid = parse_orders(orders)
    adj = Adjacency.parse(adjacency)
    if conversion not in ("best", "bbghs", "mironov"):
        raise PrivacyInputError(f"unknown conversion {conversion!r}", param="conversion")
    given = {"temperature": temperature, "clip": clip, "batch_size": batch_size}
    vals: dict[str, Any] = {}
    for name in CLIP_SOFTMAX_PARAMS:
        if name == key:
            continue
        if given[name] is None:
            raise PrivacyInputError(f"{name} is required when solving for {key}", param=name)
        vals[name] = (
            v.count(given[name], name, minimum=1) if name == "batch_size" else v.positive(given[name], name)
        )

    def eps_at(tau: float, c: float, s: float) -> tuple[float, float | None, str]:
        rdp = k * _rdp_per_token(grid, _sensitivity(c, s, tau, adj))
        res = convert_rdp(grid, rdp, d, conversion)
        return res.epsilon, res.alpha, res.method

    if key == "temperature":
        lo, hi = _bounds(lower, upper, key)
        guess = v.positive(temperature, key) if temperature is not None else 1.0
        val, r, it = _solve_continuous(
            lambda t: eps_at(t, vals["clip"], vals["batch_size"]), target,
            increasing=False, lo=lo, hi=hi, guess=guess, name=key, rtol=rtol,
        )
    elif key == "clip":
        lo, hi = _bounds(lower, upper, key)
        guess = v.positive(clip, key) if clip is not None else 1.0
        val, r, it = _solve_continuous(
            lambda c: eps_at(vals["temperature"], c, vals["batch_size"]), target,
            increasing=True, lo=lo, hi=hi, guess=guess, name=key, rtol=rtol,
        )
    else:
        lo_i = 1 if lower is None else v.count(lower, "lower", minimum=1)
        hi_i = _MAX_BATCH if upper is None else v.count(upper, "upper", minimum=1)
        if lo_i > hi_i:
            raise PrivacyInputError("search bounds for batch_size must satisfy lower <= upper", param="lower")
        n, r, it = _solve_integer_decreasing(
            lambda s: eps_at(vals["temperature"], vals["clip"], float(s)), target, lo_i, hi_i, key
        )
        val = int(n)
    params = {**vals, key: val, "compositions": k, "adjacency": adj.value}
    return Calibration(key, val, r[1], r[0], d, target, r[2], it, params)


# ---------------------------------------------------------------------------
# Gaussian mechanism
# ---------------------------------------------------------------------------

GAUSSIAN_METHODS = ("analytic", "rdp", "classical")


def calibrate_gaussian(
    target_epsilon: float,
    delta: float,
    *,
    sensitivity: float = 1.0,
    compositions: int = 1,
    method: str = "analytic",
    orders: Any = None,
    conversion: str = "best",
    lower: float | None = None,
    upper: float | None = None,
    rtol: float = 1e-10,
) -> Calibration:
    """Gaussian sigma for a target (epsilon, delta) over ``compositions`` releases.

    analytic: exact (Balle & Wang 2018; GDP composition, Dong, Roth & Su 2022);
    rdp: bisection on the RDP bound (Mironov 2017 Prop. 7 + Algorithm 2), reports alpha;
    classical: Dwork & Roth Thm A.1, one release, proven for epsilon < 1 only (warns above).
    """
    target = v.target_epsilon(target_epsilon)
    d = v.delta_open(delta)
    sens = v.positive(sensitivity, "sensitivity")
    k = v.count(compositions, "compositions", minimum=1)
    params: dict[str, Any] = {"sensitivity": sens, "compositions": k}
    if method == "analytic":
        sigma = gaussian_sigma_analytic(target, d, sens, k)
        # sigma is verified to give delta(target) <= delta exactly, so the achieved epsilon is <= target;
        # the root-finder's last ulps can land a hair above it.
        eps = min(gaussian_epsilon(sigma, d, sens, k), target)
        return Calibration("sigma", sigma, None, eps, d, target, "analytic", 0, {**params, "sigma": sigma})
    if method == "classical":
        if k != 1:
            raise PrivacyInputError(
                "the classical calibration covers one release; use method analytic or rdp for compositions > 1",
                param="compositions",
            )
        sigma, warnings = gaussian_sigma_classical(target, d, sens)
        eps = gaussian_epsilon(sigma, d, sens, 1)  # the exact epsilon it achieves
        return Calibration(
            "sigma", sigma, None, eps, d, target, "classical", 0, {**params, "sigma": sigma}, tuple(warnings)
        )
    if method != "rdp":
        raise PrivacyInputError(f"unknown method {method!r}; use one of {', '.join(GAUSSIAN_METHODS)}", param="method")
    if conversion not in ("best", "bbghs", "mironov"):
        raise PrivacyInputError(f"unknown conversion {conversion!r}", param="conversion")
    grid = parse_orders(orders)
    base = grid * (k * sens * sens / 2.0)  # rdp = base / sigma^2

    def eps_of(sigma: float) -> tuple[float, float | None, str]:
        res = convert_rdp(grid, base / (sigma * sigma), d, conversion)
        return res.epsilon, res.alpha, res.method

    lo, hi = _bounds(lower, upper, "sigma")
    sigma, r, it = _solve_continuous(eps_of, target, increasing=False, lo=lo, hi=hi, guess=1.0, name="sigma", rtol=rtol)
    return Calibration("sigma", sigma, r[1], r[0], d, target, r[2], it, {**params, "sigma": sigma})

