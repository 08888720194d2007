"""Plain entry points shared by the CLI (``dpicl privacy ...``) and the HTTP API
(``POST /v1/privacy/...``): keyword arguments in, JSON-safe dicts out, the same
keys on both sides. Bad input raises PrivacyInputError naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.privacy import _validate as v
from app.privacy.adjacency import (
    Adjacency,
    translate_gdp,
    translate_pure_dp,
    translate_zcdp,
)
from app.privacy.calibration import (
    _solve_continuous,
    calibrate_clip_softmax,
    calibrate_gaussian,
)
from app.privacy.empirical import (
    GDP_CAVEAT,
    THRESHOLD_CAVEAT,
    accuracy_epsilon_bound,
    epsilon_lower_bound,
)
from app.privacy.errors import PrivacyInputError
from app.privacy.gdp import _log_gdp_delta, gdp_epsilon, gdp_mu
from app.privacy.rdp import (
    check_rdp_curve,
    convert_rdp,
    describe_orders,
    parse_orders,
    rdp_gaussian,
    rdp_pure_dp,
    rdp_to_delta,
    rdp_zcdp,
)


def _num(x: Any) -> Any:
    """JSON-safe number: numpy scalars to Python, non-finite floats to None."""
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, (int, np.integer)):
        return int(x)
    x = float(x)
    return x if math.isfinite(x) else None


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, val in d.items():
        if isinstance(val, dict):
            out[k] = _clean(val)
        elif isinstance(val, (list, tuple)):
            out[k] = [_num(x) if not isinstance(x, (dict, list)) else x for x in val]
        else:
            out[k] = _num(val)
    return out


def _norm(name: str | None) -> str | None:
    return None if name is None else str(name).strip().lower().replace("_", "-")


# ---------------------------------------------------------------------------
# calibrate
# ---------------------------------------------------------------------------

MECHANISMS = ("clip-softmax", "gaussian")


def calibrate(
    *,
    mechanism: str,
    solve_for: str,
    target_epsilon: float,
    delta: float,
    compositions: int | None = None,
    temperature: float | None = None,
    clip: float | None = None,
    batch_size: int | None = None,
    sensitivity: float | None = None,
    orders: str | Sequence[float] | None = None,
    adjacency: str = "add-remove",
    method: str | None = None,
    conversion: str = "best",
    lower: float | None = None,
    upper: float | None = None,
) -> dict[str, Any]:
    """Solve one mechanism parameter for a target (epsilon, delta).

    Keys: mechanism, solve_for, the solved parameter under its own name, the other
    parameters, alpha, epsilon (achieved, <= target_epsilon), delta, target_epsilon,
    method, rho (total zCDP rho of the solved mechanism), adjacency, orders, iterations, warnings.
    """
    for name, val in (("mechanism", mechanism), ("solve_for", solve_for), ("target_epsilon", target_epsilon),
                      ("delta", delta)):
        if val is None:
            raise PrivacyInputError("is required", param=name)
    mech = _norm(mechanism)
    solve = _norm(solve_for)
    if mech not in MECHANISMS:
        raise PrivacyInputError(f"unknown mechanism {mechanism!r}; use one of {', '.join(MECHANISMS)}", param="mechanism")
    adj = Adjacency.parse(adjacency)
    if mech == "clip-softmax":
        if method is not None:
            raise PrivacyInputError("method applies to the gaussian mechanism; use conversion here", param="method")
        if sensitivity is not None:
            raise PrivacyInputError("sensitivity applies to the gaussian mechanism", param="sensitivity")
        if compositions is None:
            raise PrivacyInputError("compositions (sequences x tokens) is required for clip-softmax", param="compositions")
        if solve not in ("temperature", "clip", "batch-size"):
            raise PrivacyInputError(
                f"cannot solve for {solve_for!r} with clip-softmax; use temperature, clip or batch-size", param="solve_for"
            )
        cal = calibrate_clip_softmax(
            solve, target_epsilon, delta, compositions=compositions, temperature=temperature, clip=clip,
            batch_size=batch_size, orders=orders, adjacency=adj, conversion=conversion, lower=lower, upper=upper,
        )
        p = cal.params
        sens = p["clip"] / (p["batch_size"] * p["temperature"]) * (2.0 if adj == Adjacency.REPLACE_ONE else 1.0)
        rho = p["compositions"] * 0.5 * sens * sens
        grid: np.ndarray | None = parse_orders(orders)
        out = {
            "mechanism": mech,
            "solve_for": cal.parameter,
            "temperature": p["temperature"],
            "clip": p["clip"],
            "batch_size": p["batch_size"],
            "compositions": p["compositions"],
        }
    else:
        if solve != "sigma":
            raise PrivacyInputError(f"cannot solve for {solve_for!r} with gaussian; use sigma", param="solve_for")
        for name, given in (("temperature", temperature), ("clip", clip), ("batch_size", batch_size)):
            if given is not None:
                raise PrivacyInputError(f"{name} applies to clip-softmax, not gaussian", param=name)
        m = _norm(method) or "analytic"
        k = 1 if compositions is None else compositions
        sens_in = 1.0 if sensitivity is None else sensitivity
        if m != "rdp" and orders is not None:
            raise PrivacyInputError("orders apply to method rdp only", param="orders")
        cal = calibrate_gaussian(
            target_epsilon, delta, sensitivity=sens_in, compositions=k, method=m, orders=orders,
            conversion=conversion, lower=lower, upper=upper,
        )
        p = cal.params
        ratio = p["sensitivity"] / p["sigma"]
        rho = p["compositions"] * ratio * ratio / 2.0
        grid = parse_orders(orders) if m == "rdp" else None
        out = {
            "mechanism": mech,
            "solve_for": "sigma",
            "sigma": p["sigma"],
            "sensitivity": p["sensitivity"],
            "compositions": p["compositions"],
        }
    out.update(
        {
            "alpha": cal.alpha,
            "epsilon": cal.epsilon,
            "delta": cal.delta,
            "target_epsilon": cal.target_epsilon,
            "method": cal.method,
            "rho": rho,
            "adjacency": adj.value,
            "orders": describe_orders(grid) if grid is not None else None,
            "iterations": cal.iterations,
            "warnings": list(cal.warnings),
        }
    )
    return _clean(out)


# ---------------------------------------------------------------------------
# convert
# ---------------------------------------------------------------------------

SOURCES = ("rdp", "zcdp", "pure", "gdp", "gaussian")
TARGETS = ("epsilon", "delta", "mu", "rho")


def _rho_for(epsilon: float, delta: float, grid: np.ndarray, conversion: str) -> tuple[float, float | None, str]:
    """Largest rho with rho-zCDP => (epsilon, delta)-DP through the RDP grid (bisection)."""

    def eps_of(rho: float) -> tuple[float, float | None, str]:
        r = convert_rdp(grid, rho * grid, delta, conversion)
        return r.epsilon, r.alpha, r.method

    rho, r, _ = _solve_continuous(
        eps_of, epsilon, increasing=True, lo=1e-300, hi=1e12, guess=1.0, name="rho", rtol=1e-12
    )
    return rho, r[1], r[2]


def convert(
    *,
    rdp: Sequence[float] | None = None,
    orders: str | Sequence[float] | None = None,
    rho: float | None = None,
    pure_epsilon: float | None = None,
    mu: float | None = None,
    sigma: float | None = None,
    sensitivity: float | None = None,
    count: int = 1,
    delta: float | None = None,
    epsilon: float | None = None,
    to: str | None = None,
    adjacency: str = "add-remove",
    to_adjacency: str | None = None,
    conversion: str = "best",
) -> dict[str, Any]:
    """Convert a guarantee to (epsilon, delta): give exactly one source (an RDP curve
    ``rdp`` on ``orders``, zCDP ``rho``, ``pure_epsilon``, GDP ``mu``, or Gaussian ``sigma``
    with ``sensitivity``), composed ``count`` times, and ``delta`` (-> epsilon) or
    ``epsilon`` (-> delta). Or "back": with no source, ``epsilon`` and ``delta`` and
    ``to`` = mu | rho give the largest GDP mu / zCDP rho that implies (epsilon, delta).
    """
    given = {
        "rdp": rdp is not None,
        "zcdp": rho is not None,
        "pure": pure_epsilon is not None,
        "gdp": mu is not None,
        "gaussian": sigma is not None,
    }
    sources = [s for s, g in given.items() if g]
    if len(sources) > 1:
        raise PrivacyInputError(
            f"give exactly one of rdp, rho, pure_epsilon, mu, sigma (got {', '.join(sources)})", param="source"
        )
    if conversion not in ("best", "bbghs", "mironov"):
        raise PrivacyInputError(f"unknown conversion {conversion!r}; use best, bbghs or mironov", param="conversion")
    k = v.count(count, "count", minimum=1)
    adj = Adjacency.parse(adjacency)
    out_adj = Adjacency.parse(to_adjacency, "to_adjacency") if to_adjacency is not None else adj
    target = _norm(to)
    if target is not None and target not in TARGETS:
        raise PrivacyInputError(f"unknown target {to!r}; use one of {', '.join(TARGETS)}", param="to")
    if sensitivity is not None and sigma is None:
        raise PrivacyInputError("sensitivity goes with sigma", param="sensitivity")

    result: dict[str, Any] = {
        "source": None, "count": k, "adjacency": out_adj.value, "epsilon": None, "delta": None,
        "alpha": None, "method": None, "epsilon_bbghs": None, "epsilon_mironov": None,
        "epsilon_basic": None, "rho": None, "mu": None, "orders": None, "warnings": [],
    }

    # ---- back: (epsilon, delta) -> mu or rho -------------------------------
    if not sources:
        if target not in ("mu", "rho"):
            raise PrivacyInputError(
                "give a source (rdp, rho, pure_epsilon, mu or sigma), or epsilon, delta and to=mu|rho", param="source"
            )
        if epsilon is None or delta is None:
            raise PrivacyInputError("epsilon and delta are both required", param="epsilon" if epsilon is None else "delta")
        if out_adj != adj:
            raise PrivacyInputError("adjacency translation needs a source guarantee", param="to_adjacency")
        e_in = v.target_epsilon(epsilon, "epsilon")
        d_in = v.delta_open(delta)
        result.update({"source": "approx-dp", "epsilon": e_in, "delta": d_in})
        if k != 1:
            raise PrivacyInputError("count applies to a source guarantee", param="count")
        if target == "mu":
            if orders is not None:
                parse_orders(orders)  # not used for mu, but a bad grid is still a 422 naming it
            result.update({"mu": gdp_mu(e_in, d_in), "method": "gdp"})
        else:
            grid_in = parse_orders(orders)
            r, alpha, used = _rho_for(e_in, d_in, grid_in, conversion)
            result.update({"rho": r, "alpha": alpha, "method": used, "orders": describe_orders(grid_in)})
        return _clean(result)

    src = sources[0]
    result["source"] = src
    if target in ("mu", "rho"):
        raise PrivacyInputError("to=mu|rho takes epsilon and delta without a source", param="to")
    if (delta is None) == (epsilon is None):
        raise PrivacyInputError("give exactly one of delta (to get epsilon) or epsilon (to get delta)", param="delta")
    if target == "epsilon" and delta is None:
        raise PrivacyInputError("to=epsilon needs delta", param="delta")
    if target == "delta" and epsilon is None:
        raise PrivacyInputError("to=delta needs epsilon", param="epsilon")
    d = v.delta_open(delta) if delta is not None else None
    e = v.nonnegative(epsilon, "epsilon") if epsilon is not None else None

    grid: np.ndarray | None = None
    curve: np.ndarray | None = None
    basic: float | None = None
    exact_mu: float | None = None
    if src == "rdp":
        if orders is None:
            raise PrivacyInputError("an RDP curve needs its orders", param="orders")
        if out_adj != adj:
            raise PrivacyInputError(
                "adjacency translation of an RDP curve is not supported; translate pure, zCDP or GDP", param="to_adjacency"
            )
        if rdp is None:
            raise PrivacyInputError("an RDP curve needs its values", param="rdp")
        grid, curve = check_rdp_curve(orders, rdp)
        curve = k * curve
    elif src == "zcdp":
        r = translate_zcdp(v.nonnegative(rho, "rho"), adj, out_adj)
        grid = parse_orders(orders)
        curve = rdp_zcdp(grid, k * r)
        result["rho"] = k * r
    elif src == "pure":
        pe = translate_pure_dp(v.nonnegative(pure_epsilon, "pure_epsilon"), adj, out_adj)
        grid = parse_orders(orders)
        curve = k * rdp_pure_dp(grid, pe)
        basic = k * pe
        result["rho"] = k * pe * pe / 2.0
    else:  # gdp or gaussian: exact curve from mu, and the RDP of the same Gaussian pair
        if src == "gdp":
            m0 = v.nonnegative(mu, "mu")
        else:  # the Gaussian mechanism is exactly (Delta/sigma)-GDP (Dong, Roth & Su 2022, Thm 2.7)
            m0 = (1.0 if sensitivity is None else v.positive(sensitivity, "sensitivity")) / v.positive(sigma, "sigma")
        exact_mu = math.sqrt(k) * translate_gdp(m0, adj, out_adj)
        grid = parse_orders(orders)
        # mu-GDP => (alpha, alpha mu^2/2)-RDP: by Blackwell (Dong, Roth & Su 2022, Thm 2.10) the pair is a
        # post-processing of (N(0,1), N(mu,1)), whose RDP is Mironov 2017 Prop. 7.
        curve = rdp_gaussian(grid, 1.0, exact_mu)
    if exact_mu is not None:
        result["mu"] = exact_mu
        result["rho"] = exact_mu * exact_mu / 2.0
    if grid is not None:
        result["orders"] = describe_orders(grid)

    if d is not None:  # -> epsilon
        result["delta"] = d
        candidates: list[tuple[float, float | None, str]] = []
        if curve is not None:
            conv = convert_rdp(grid, curve, d, conversion)
            result["epsilon_bbghs"] = conv.epsilon_bbghs
            result["epsilon_mironov"] = conv.epsilon_mironov
            candidates.append((conv.epsilon, conv.alpha, conv.method))
        if basic is not None:
            result["epsilon_basic"] = basic
            if conversion == "best":
                candidates.append((basic, None, "basic"))
        if exact_mu is not None and conversion == "best":
            candidates.append((gdp_epsilon(exact_mu, d), None, "gdp"))  # exact (Dong, Roth & Su Cor. 2.13)
        eps_v, alpha, used = min(candidates, key=lambda c: c[0])
        result.update({"epsilon": eps_v, "alpha": alpha, "method": used})
    else:  # -> delta
        assert e is not None  # checked above: to=delta needs epsilon
        result["epsilon"] = e
        candidates = []
        if curve is not None:
            dl, alpha = rdp_to_delta(grid, curve, e)
            candidates.append((dl, alpha, "rdp"))
        if basic is not None and basic <= e and conversion == "best":
            candidates.append((0.0, None, "basic"))
        if exact_mu is not None and conversion == "best":
            candidates.append((math.exp(_log_gdp_delta(exact_mu, e)), None, "gdp"))
        dl, alpha, used = min(candidates, key=lambda c: c[0])
        result.update({"delta": dl, "alpha": alpha, "method": used})
    return _clean(result)


# ---------------------------------------------------------------------------
# empirical
# ---------------------------------------------------------------------------


def empirical(
    *,
    tp: int | None = None,
    fn: int | None = None,
    fp: int | None = None,
    tn: int | None = None,
    trials: int | None = None,
    accuracy: float | None = None,
    correct: int | None = None,
    confidence: float = 0.95,
    delta: float = 0.0,
) -> dict[str, Any]:
    """Empirical epsilon lower bound from attack counts (tp, fn, fp, tn) or from an
    auditing accuracy (``accuracy`` or ``correct`` out of ``trials``)."""
    counts = {"tp": tp, "fn": fn, "fp": fp, "tn": tn}
    have_counts = any(x is not None for x in counts.values())
    have_acc = accuracy is not None or correct is not None
    if have_counts and have_acc:
        raise PrivacyInputError("give either the counts (tp, fn, fp, tn) or an accuracy, not both", param="accuracy")
    if not have_counts and not have_acc:
        raise PrivacyInputError("give the counts (tp, fn, fp, tn) or accuracy and trials", param="tp")
    if have_counts:
        for name, val in counts.items():
            if val is None:
                raise PrivacyInputError("all four counts tp, fn, fp, tn are required", param=name)
        total = sum(v.count(val, name) for name, val in counts.items())
        if trials is not None and v.count(trials, "trials", minimum=1) != total:
            raise PrivacyInputError(f"tp + fn + fp + tn = {total} does not add up to trials = {trials}", param="trials")
        assert tp is not None and fn is not None and fp is not None and tn is not None  # checked just above
        b = epsilon_lower_bound(tp, fn, fp, tn, confidence, delta)
        out = {
            "mode": "counts",
            "tp": b.tp, "fn": b.fn, "fp": b.fp, "tn": b.tn, "trials": total,
            "confidence": b.confidence, "delta": b.delta,
            "tpr": b.tpr, "fpr": b.fpr,
            "tpr_lower": b.tpr_lower, "fpr_upper": b.fpr_upper,
            "tnr_lower": b.tnr_lower, "fnr_upper": b.fnr_upper,
            "epsilon": b.epsilon, "direction": b.direction, "epsilon_point": b.epsilon_point,
            "gdp_mu_lower": b.gdp_mu_lower, "epsilon_gdp": b.epsilon_gdp,
            "rigorous": {"epsilon": True, "epsilon_point": False, "gdp_mu_lower": True, "epsilon_gdp": False},
            "notes": [
                (
                    "epsilon is a lower bound at the confidence level (two-sided Clopper-Pearson per rate, "
                    "joint coverage >= confidence)"
                ),
                THRESHOLD_CAVEAT,
                "gdp_mu_lower bounds the mechanism's GDP mu only if it is mu-GDP for some mu",
                GDP_CAVEAT,
            ],
        }
        return _clean(out)
    if trials is None:
        raise PrivacyInputError("trials is required with accuracy", param="trials")
    n = v.count(trials, "trials", minimum=1)
    warnings: list[str] = []
    if correct is not None and accuracy is not None:
        raise PrivacyInputError("give accuracy or correct, not both", param="correct")
    if correct is not None:
        k = v.count(correct, "correct")
        if k > n:
            raise PrivacyInputError(f"correct = {k} exceeds trials = {n}", param="correct")
    else:
        a = v.finite(accuracy, "accuracy")
        if not 0.0 <= a <= 1.0:
            raise PrivacyInputError(f"must lie in [0, 1], got {a:g}", param="accuracy")
        exact = a * n
        k = math.floor(exact + 1e-9)
        if abs(exact - round(exact)) > 1e-6:
            warnings.append(
                f"accuracy x trials = {exact:.4f} is not a whole number; rounded down to {k} correct (the safe side)"
            )
    b2 = accuracy_epsilon_bound(k, n, confidence, delta)
    out = {
        "mode": "accuracy",
        "correct": b2.correct, "trials": b2.trials, "accuracy": b2.accuracy,
        "confidence": b2.confidence, "delta": b2.delta,
        "accuracy_lower": b2.accuracy_lower,
        "epsilon": b2.epsilon, "epsilon_point": b2.epsilon_point,
        "rigorous": {"epsilon": True, "epsilon_point": False},
        "notes": [
            (
                "epsilon = log((a_lo - delta)/(1 - a_lo)) at the one-sided Clopper-Pearson lower bound a_lo "
                "(ContextLeak Appendix C.3); valid for canaries inserted with probability 1/2 in independent trials"
            ),
            THRESHOLD_CAVEAT,
        ],
        "warnings": warnings,
    }
    return _clean(out)
