"""Renyi DP: per-mechanism RDP curves, composition, and RDP -> (epsilon, delta).

Every function is vectorised over a grid of orders ``alpha > 1`` (a numpy
array); the RDP "curve" of a mechanism is its RDP epsilon at each order.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.privacy import _validate as v
from app.privacy.errors import PrivacyInputError

# Same grid as Google dp_accounting's RdpAccountant (1.1..10.9 step 0.1, 11..63,
# 128..1024): fine near 1 for small epsilons, large orders for pure DP.
DEFAULT_ORDERS: tuple[float, ...] = tuple(
    [1.0 + x / 10.0 for x in range(1, 100)] + [float(a) for a in range(11, 64)] + [128.0, 256.0, 512.0, 1024.0]
)
# The grid of ICLInf Algorithm 2/3 ("candidate orders A in (2, 100)"): integers 2..99.
ICLINF_ORDERS: tuple[float, ...] = tuple(float(a) for a in range(2, 100))

_MAX_ORDERS = 100_000
_RANGE = re.compile(r"^\s*([0-9]+)\s*-\s*([0-9]+)\s*$")


def _expand_orders(spec: str | Sequence[float] | np.ndarray, param: str) -> np.ndarray:
    """Expand a grid spec into orders in the given sequence, each checked finite and > 1."""
    values: list[float] = []
    if isinstance(spec, str):
        if not spec.strip():
            raise PrivacyInputError("the order grid is empty", param=param)
        for part in spec.split(","):
            part = part.strip()
            if not part:
                raise PrivacyInputError(f"empty item in order grid {spec!r}", param=param)
            m = _RANGE.match(part)
            if m:
                lo, hi = int(m.group(1)), int(m.group(2))
                if hi < lo:
                    raise PrivacyInputError(f"order range {part!r} is empty (end < start)", param=param)
                if hi - lo + 1 > _MAX_ORDERS:
                    raise PrivacyInputError(f"order range {part!r} has more than {_MAX_ORDERS} orders", param=param)
                values.extend(float(a) for a in range(lo, hi + 1))
            else:
                try:
                    values.append(float(part))
                except ValueError:
                    raise PrivacyInputError(
                        f"cannot read order {part!r}; use e.g. '2-99' or '2,3,4.5'", param=param
                    ) from None
    else:
        try:
            values = [float(a) for a in np.asarray(spec, dtype=float).ravel()]
        except (TypeError, ValueError):
            raise PrivacyInputError("orders must be numbers", param=param) from None
    if not values:
        raise PrivacyInputError("the order grid is empty", param=param)
    if len(values) > _MAX_ORDERS:
        raise PrivacyInputError(f"at most {_MAX_ORDERS} orders", param=param)
    arr = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(arr)):
        raise PrivacyInputError("orders must be finite numbers", param=param)
    if np.any(arr <= 1.0):
        raise PrivacyInputError(f"every Renyi order must be > 1 (got {arr.min():g})", param=param)
    return arr


def parse_orders(spec: str | Sequence[float] | np.ndarray | None, param: str = "orders") -> np.ndarray:
    """Parse an order grid: ``None`` (default grid), ``"2-99"`` (integers, inclusive),
    ``"2,3,4.5"``, a mix ``"2-10,12.5,20-30"``, or a sequence of numbers.

    Returns a sorted array of unique orders, each finite and > 1.
    """
    if spec is None:
        return np.array(DEFAULT_ORDERS)
    return np.unique(_expand_orders(spec, param))


def describe_orders(orders: np.ndarray) -> dict[str, Any]:
    """A short JSON summary of a grid (the full grid can be long)."""
    return {"count": int(orders.size), "min": float(orders[0]), "max": float(orders[-1])}


# ---------------------------------------------------------------------------
# RDP curves of basic mechanisms
# ---------------------------------------------------------------------------


def rdp_gaussian(orders: np.ndarray, sigma: float, sensitivity: float = 1.0) -> np.ndarray:
    """Gaussian mechanism, L2 sensitivity Delta, noise N(0, sigma^2 I):
    eps(alpha) = alpha Delta^2 / (2 sigma^2)  (Mironov 2017, Prop. 7)."""
    s = v.positive(sigma, "sigma")
    d = v.nonnegative(sensitivity, "sensitivity")
    r = d / s  # (d/s)^2, not d^2 / s^2: both squares can overflow to inf / inf = nan
    return np.asarray(orders, dtype=float) * (r * r / 2.0)


def rdp_zcdp(orders: np.ndarray, rho: float) -> np.ndarray:
    """rho-zCDP => (alpha, rho alpha)-RDP for every alpha > 1
    (ICLInf Thm C.3; Bun & Steinke 2016 Def. 1.1)."""
    r = v.nonnegative(rho, "rho")
    return r * np.asarray(orders, dtype=float)


def _logcosh(x: np.ndarray) -> np.ndarray:
    """log cosh(x) without overflow (large |x|) or cancellation (small |x|)."""
    ax = np.abs(np.asarray(x, dtype=float))
    # cosh x = 1 + 2 sinh^2(x/2): exact for small x (argument capped so the unused branch cannot overflow).
    small = np.log1p(2.0 * np.sinh(np.minimum(ax, 1.0) / 2.0) ** 2)
    # cosh x = e^x (1 + e^{-2x}) / 2: no overflow for large x.
    large = ax + np.log1p(np.exp(-2.0 * ax)) - math.log(2.0)
    return np.where(ax < 1.0, small, large)


def _em_sinh_rdp(orders: np.ndarray, eps: float) -> np.ndarray:
    """(1/(alpha-1)) log[(sinh(alpha eps) - sinh((alpha-1) eps)) / sinh(eps)]  (ICLInf Thm C.5).

    With sinh a - sinh b = 2 cosh((a+b)/2) sinh((a-b)/2) and sinh(eps) = 2 sinh(eps/2) cosh(eps/2)
    the ratio is cosh((alpha - 1/2) eps) / cosh(eps/2), evaluated in log form so that
    alpha*eps > 710 does not overflow. (This is also the exact RDP of eps-randomized response.)
    """
    a = np.asarray(orders, dtype=float)
    if eps == 0.0:
        return np.zeros_like(a)
    if not math.isfinite(eps):  # no guarantee (e.g. clip / (s tau) overflowed); inf - inf below would be nan
        return np.full_like(a, math.inf)
    return (_logcosh((a - 0.5) * eps) - _logcosh(np.array(eps / 2.0))) / (a - 1.0)


def rdp_exponential_mechanism(orders: np.ndarray, epsilon: float) -> np.ndarray:
    """RDP of an eps-DP exponential mechanism (ICLInf Thm C.5, from Wu et al. 2024 Thm 8):
    eps_EM(alpha) = min(alpha eps^2 / 2, log((sinh(alpha eps) - sinh((alpha-1) eps)) / sinh(eps)) / (alpha-1))."""
    e = v.nonnegative(epsilon, "epsilon")
    a = np.asarray(orders, dtype=float)
    return np.minimum(a * e * e / 2.0, _em_sinh_rdp(a, e))


def rdp_pure_dp(orders: np.ndarray, epsilon: float) -> np.ndarray:
    """Pure eps-DP => RDP at every order: min(eps, alpha eps^2/2, sinh form)
    (eps = D_infinity bounds every D_alpha, which is non-decreasing in alpha; Bun & Steinke 2016
    Prop. 3.3 and its proof give alpha eps^2 / 2 and the sinh form; ICLInf Thm C.5 states the same
    bound for the exponential mechanism)."""
    e = v.nonnegative(epsilon, "epsilon")
    return np.minimum(rdp_exponential_mechanism(orders, e), e)


def compose_rdp(*curves: Iterable[float]) -> np.ndarray:
    """RDP composition on a common grid: eps(alpha) adds up (ICLInf Thm C.7; Mironov 2017 Prop. 1)."""
    if not curves:
        raise PrivacyInputError("nothing to compose", param="rdp")
    total = np.zeros_like(np.asarray(curves[0], dtype=float))
    for c in curves:
        total = total + np.asarray(c, dtype=float)
    return total


def rdp_on_grid(
    source_orders: Sequence[float], source_rdp: Sequence[float], orders: np.ndarray
) -> np.ndarray:
    """Carry an RDP curve given on ``source_orders`` to the grid ``orders``.

    D_alpha is non-decreasing in alpha (van Erven & Harremoes 2014, Thm 3), so the
    value at the nearest source order >= alpha is a valid bound at alpha; orders
    above the largest source order get +inf (no guarantee there).
    """
    so = np.asarray(source_orders, dtype=float)
    sr = np.asarray(source_rdp, dtype=float)
    idx = np.argsort(so)
    so, sr = so[idx], sr[idx]
    # Running minimum from the right: bound at alpha = min over source orders >= alpha.
    sr = np.minimum.accumulate(sr[::-1])[::-1]
    pos = np.searchsorted(so, np.asarray(orders, dtype=float), side="left")
    out = np.full(np.shape(orders), np.inf)
    ok = pos < so.size
    out[ok] = sr[pos[ok]]
    return out


def check_rdp_curve(
    orders: str | Sequence[float] | np.ndarray, rdp: Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Validate a caller's (orders, rdp) pair: one value per order, orders > 1 and distinct,
    rdp >= 0 (+inf allowed: no guarantee at that order). Returns both sorted by order."""
    o = _expand_orders(orders, "orders")
    try:
        r = np.asarray(rdp, dtype=float).ravel()
    except (TypeError, ValueError):
        raise PrivacyInputError("rdp must be numbers", param="rdp") from None
    if r.size == 0:
        raise PrivacyInputError("the RDP curve is empty", param="rdp")
    if r.size != o.size:
        raise PrivacyInputError(f"rdp has {r.size} values but orders has {o.size}; give one per order", param="rdp")
    if np.any(np.isnan(r)):
        raise PrivacyInputError("rdp values must be numbers (NaN given)", param="rdp")
    if np.any(r < 0):
        raise PrivacyInputError("rdp values must be >= 0", param="rdp")
    if np.unique(o).size != o.size:
        raise PrivacyInputError("orders must not repeat", param="orders")
    idx = np.argsort(o)
    return o[idx], r[idx]


# ---------------------------------------------------------------------------
# RDP -> (epsilon, delta)
# ---------------------------------------------------------------------------


def _eps_bbghs(orders: np.ndarray, rdp: np.ndarray, delta: float) -> np.ndarray:
    """Per-order epsilon by Balle et al. 2020 Thm 21 (ICLInf Thm C.8):
    eps = rdp + log((alpha-1)/alpha) - (log delta + log alpha) / (alpha - 1);
    and eps = 0 where sqrt(1 - exp(-rdp)) <= delta (KL >= TV bound, Bretagnolle-Huber;
    as dp_accounting's compute_epsilon)."""
    eps = rdp + np.log1p(-1.0 / orders) - (math.log(delta) + np.log(orders)) / (orders - 1.0)
    tv_ok = delta * delta + np.expm1(-rdp) > 0.0
    eps = np.where(tv_ok, 0.0, eps)
    return np.maximum(eps, 0.0)


def _eps_mironov(orders: np.ndarray, rdp: np.ndarray, delta: float) -> np.ndarray:
    """Per-order epsilon by Mironov 2017 Prop. 3: eps = rdp + log(1/delta) / (alpha - 1)."""
    return np.maximum(rdp - math.log(delta) / (orders - 1.0), 0.0)


_METHODS = ("best", "bbghs", "mironov")


@dataclass(frozen=True)
class RdpConversion:
    """Result of RDP -> (epsilon, delta), with both conversions reported."""

    epsilon: float
    delta: float
    alpha: float
    method: str
    epsilon_bbghs: float
    alpha_bbghs: float
    epsilon_mironov: float
    alpha_mironov: float


def _argmin(eps: np.ndarray, orders: np.ndarray) -> tuple[float, float]:
    i = int(np.argmin(eps))
    return float(eps[i]), float(orders[i])


def convert_rdp(orders: np.ndarray, rdp: np.ndarray, delta: float, method: str = "best") -> RdpConversion:
    """Minimise over the order grid (ICLInf Algorithm 2) with both conversions.

    ``method``: "bbghs" (Balle et al. 2020), "mironov" (Mironov 2017) or "best" (the
    smaller; both are valid upper bounds, so their minimum is too).
    Inputs must already be validated arrays (see ``rdp_to_epsilon`` for the checked entry).
    """
    eb, ab = _argmin(_eps_bbghs(orders, rdp, delta), orders)
    em, am = _argmin(_eps_mironov(orders, rdp, delta), orders)
    use_bbghs = method == "bbghs" or (method == "best" and eb <= em)
    eps, alpha, used = (eb, ab, "bbghs") if use_bbghs else (em, am, "mironov")
    return RdpConversion(eps, delta, alpha, used, eb, ab, em, am)


def rdp_to_epsilon(
    orders: Sequence[float] | np.ndarray,
    rdp: Sequence[float] | np.ndarray,
    delta: float,
    method: str = "best",
) -> tuple[float, float]:
    """(epsilon, alpha) for a composed RDP curve at ``delta`` (ICLInf Algorithm 2, Thm C.8)."""
    if method not in _METHODS:
        raise PrivacyInputError(f"unknown conversion {method!r}; use one of {', '.join(_METHODS)}", param="method")
    d = v.delta_open(delta)
    o, r = check_rdp_curve(orders, rdp)
    res = convert_rdp(o, r, d, method)
    return res.epsilon, res.alpha


def rdp_to_delta(
    orders: Sequence[float] | np.ndarray, rdp: Sequence[float] | np.ndarray, epsilon: float
) -> tuple[float, float]:
    """(delta, alpha): the smallest delta over the grid at a given epsilon.

    Per order the smallest of: Balle et al. 2020 Thm 21 solved for delta,
    log delta = (alpha-1)(rdp - eps + log(1 - 1/alpha)) - log alpha; Mironov 2017
    Prop. 3, delta = exp((alpha-1)(rdp - eps)); and the TV bound sqrt(1 - e^{-rdp}).
    """
    eps = v.nonnegative(epsilon, "epsilon")
    o, r = check_rdp_curve(orders, rdp)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        log_b = (o - 1.0) * (r - eps + np.log1p(-1.0 / o)) - np.log(o)
        log_m = (o - 1.0) * (r - eps)
        log_tv = 0.5 * np.log1p(-np.exp(-r))
    log_d = np.minimum(np.minimum(log_b, log_m), log_tv)
    log_d = np.where(np.isnan(log_d), np.inf, log_d)
    i = int(np.argmin(log_d))
    return float(min(1.0, math.exp(min(log_d[i], 0.0)))), float(o[i])
