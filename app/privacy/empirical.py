"""Empirical privacy bounds from audit outcomes.

Which results are rigorous:

* ``epsilon_lower_bound`` (counts) and ``accuracy_epsilon_bound`` (accuracy) are
  rigorous lower bounds on the epsilon of ANY (epsilon, delta)-DP mechanism,
  holding with probability >= confidence, provided the attack's decision rule
  was fixed before the counted trials (no threshold tuned on the same data)
  and the trials are independent.
* The GDP route (``gdp_mu_lower_bound`` then its epsilon at delta) assumes the
  mechanism's trade-off curve is Gaussian. mu_lower is a valid lower bound on
  the mechanism's GDP mu, but the epsilon computed from it is not a lower bound
  on the epsilon of a non-Gaussian mechanism (exponential mechanism, argmax of
  noisy votes, randomized response): exact eps = 1 randomized response gives a
  "GDP epsilon" of about 5.6 at delta 1e-5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import special

from app.privacy import _validate as v
from app.privacy.errors import PrivacyInputError
from app.privacy.gdp import gdp_epsilon

GDP_CAVEAT = (
    "epsilon_gdp assumes a Gaussian trade-off curve (tight-auditing paper, Section 2); it is an estimate, "
    "not a lower bound, for non-Gaussian mechanisms such as the exponential mechanism or argmax of noisy votes"
)
THRESHOLD_CAVEAT = (
    "the bound is valid only if the attack's decision threshold was chosen on data other than these counts"
)


# ---------------------------------------------------------------------------
# Clopper-Pearson
# ---------------------------------------------------------------------------


def _check_kn(k: int, n: int, kname: str = "k", nname: str = "n") -> tuple[int, int]:
    n = v.count(n, nname, minimum=1, maximum=4 * v.MAX_COUNT)  # n: a sum of counts (tp + fn, or all four)
    k = v.count(k, kname, minimum=0)
    if k > n:
        raise PrivacyInputError(f"{kname} = {k} exceeds {nname} = {n}", param=kname)
    return k, n


def clopper_pearson_lower(k: int, n: int, level: float) -> float:
    """One-sided exact lower bound with coverage >= level (Clopper & Pearson 1934): the
    (1 - level)-quantile of Beta(k, n - k + 1), and 0 at k = 0 (where beta.ppf gives NaN)."""
    k, n = _check_kn(k, n)
    lv = v.probability_open(level, "confidence")
    if k == 0:
        return 0.0
    return float(special.betaincinv(k, n - k + 1, 1.0 - lv))


def clopper_pearson_upper(k: int, n: int, level: float) -> float:
    """One-sided exact upper bound: the level-quantile of Beta(k + 1, n - k), and 1 at k = n."""
    k, n = _check_kn(k, n)
    lv = v.probability_open(level, "confidence")
    if k == n:
        return 1.0
    return float(special.betaincinv(k + 1, n - k, lv))


# ---------------------------------------------------------------------------
# Counts (TP, FN, FP, TN)
# ---------------------------------------------------------------------------


def _log_ratio_bound(num: float, den: float, delta: float) -> float:
    """log((num - delta) / den), 0 when num <= delta: from num <= e^eps den + delta
    (hypothesis-testing form of (eps, delta)-DP, Kairouz, Oh & Viswanath 2015 Thm 2.1)."""
    if num - delta <= 0.0 or den <= 0.0:
        return 0.0 if num - delta <= 0.0 else math.inf
    return max(0.0, math.log((num - delta) / den))


@dataclass(frozen=True)
class CountsBound:
    tp: int
    fn: int
    fp: int
    tn: int
    confidence: float
    delta: float
    tpr: float
    fpr: float
    tpr_lower: float
    fpr_upper: float
    tnr_lower: float
    fnr_upper: float
    epsilon: float  # rigorous lower bound, max over both directions
    direction: str  # "tpr/fpr" | "tnr/fnr"
    epsilon_point: float  # plug-in estimate log((TPR - delta)/FPR), not a bound
    gdp_mu_lower: float
    epsilon_gdp: float | None  # epsilon of the Gaussian mechanism with mu = gdp_mu_lower; None at delta = 0


def _check_counts(tp: int, fn: int, fp: int, tn: int) -> tuple[int, int, int, int]:
    tp = v.count(tp, "tp")
    fn = v.count(fn, "fn")
    fp = v.count(fp, "fp")
    tn = v.count(tn, "tn")
    if tp + fn == 0:
        raise PrivacyInputError("tp + fn must be >= 1 (no trials with the canary)", param="tp")
    if fp + tn == 0:
        raise PrivacyInputError("fp + tn must be >= 1 (no trials without the canary)", param="fp")
    return tp, fn, fp, tn


def rate_bounds(tp: int, fn: int, fp: int, tn: int, confidence: float) -> tuple[float, float, float, float]:
    """(TPR_lo, FPR_hi, TNR_lo, FNR_hi): each a one-sided Clopper-Pearson bound at level
    (1 + confidence)/2, i.e. the ends of two-sided ``confidence`` intervals (Jagielski et al. 2020).
    TNR_lo = 1 - FPR_hi and FNR_hi = 1 - TPR_lo, so the four hold jointly with prob. >= confidence."""
    tp, fn, fp, tn = _check_counts(tp, fn, fp, tn)
    c = v.probability_open(confidence, "confidence")
    level = (1.0 + c) / 2.0
    return (
        clopper_pearson_lower(tp, tp + fn, level),
        clopper_pearson_upper(fp, fp + tn, level),
        clopper_pearson_lower(tn, fp + tn, level),
        clopper_pearson_upper(fn, tp + fn, level),
    )


def gdp_mu_from_rates(tpr: float, fpr: float) -> float:
    """mu = Phi^-1(TPR) - Phi^-1(FPR) = Phi^-1(1 - FNR) - Phi^-1(FPR), floored at 0 (never |mu|:
    a negative value means no evidence, jax_privacy PR #270) (tight-auditing paper, Section 2)."""
    t = v.finite(tpr, "tpr")
    f = v.finite(fpr, "fpr")
    if not (0.0 <= t <= 1.0 and 0.0 <= f <= 1.0):
        raise PrivacyInputError("rates must lie in [0, 1]", param="tpr")
    mu = float(special.ndtri(t) - special.ndtri(f))
    if math.isnan(mu):  # both at the same edge
        return 0.0
    return max(0.0, mu)


def gdp_mu_lower_bound(tp: int, fn: int, fp: int, tn: int, confidence: float = 0.95) -> float:
    """mu_lower = Phi^-1(1 - beta_hi) - Phi^-1(alpha_hi), alpha_hi / beta_hi the upper
    Clopper-Pearson bounds on FPR / FNR (tight-auditing paper, Section 2)."""
    _, fpr_hi, _, fnr_hi = rate_bounds(tp, fn, fp, tn, confidence)
    return gdp_mu_from_rates(1.0 - fnr_hi, fpr_hi)


def epsilon_lower_bound(
    tp: int, fn: int, fp: int, tn: int, confidence: float = 0.95, delta: float = 0.0
) -> CountsBound:
    """Empirical (epsilon, delta) lower bound from attack counts.

    eps_lo = max(log((TPR_lo - delta)/FPR_hi), log((TNR_lo - delta)/FNR_hi)), floored at 0,
    with two-sided ``confidence`` Clopper-Pearson intervals per rate (Jagielski et al. 2020;
    (500, 0, 0, 500) at 0.99 gives 4.5419). Both directions follow from the definition of DP
    applied to the event "guess in" and its complement.
    """
    tp, fn, fp, tn = _check_counts(tp, fn, fp, tn)
    c = v.probability_open(confidence, "confidence")
    d = v.delta_halfopen(delta)
    tpr_lo, fpr_hi, tnr_lo, fnr_hi = rate_bounds(tp, fn, fp, tn, c)
    e1 = _log_ratio_bound(tpr_lo, fpr_hi, d)
    e2 = _log_ratio_bound(tnr_lo, fnr_hi, d)
    eps, direction = (e1, "tpr/fpr") if e1 >= e2 else (e2, "tnr/fnr")
    tpr, fpr = tp / (tp + fn), fp / (fp + tn)
    point = max(_log_ratio_bound(tpr, fpr, d), _log_ratio_bound(1.0 - fpr, 1.0 - tpr, d))
    mu = gdp_mu_from_rates(1.0 - fnr_hi, fpr_hi)
    if d > 0.0:
        eps_gdp: float | None = gdp_epsilon(mu, d)
    else:
        eps_gdp = 0.0 if mu == 0.0 else None  # mu > 0 has no finite epsilon at delta = 0
    return CountsBound(
        tp, fn, fp, tn, c, d, tpr, fpr, tpr_lo, fpr_hi, tnr_lo, fnr_hi, eps, direction, point, mu, eps_gdp
    )


# ---------------------------------------------------------------------------
# Accuracy (ContextLeak)
# ---------------------------------------------------------------------------


def accuracy_to_epsilon(accuracy: float, delta: float = 0.0) -> float:
    """eps = log(a / (1 - a)) (ContextLeak Appendix C.3, after Steinke et al. 2023);
    with delta, log((a - delta) / (1 - a)). Floored at 0; +inf at a = 1.

    With the canary inserted with probability 1/2, (eps, delta)-DP gives
    TPR <= e^eps FPR + delta and TNR <= e^eps FNR + delta; adding them,
    accuracy a = (TPR + TNR)/2 <= (e^eps + delta)/(1 + e^eps).
    """
    a = v.finite(accuracy, "accuracy")
    if not 0.0 <= a <= 1.0:
        raise PrivacyInputError(f"must lie in [0, 1], got {a:g}", param="accuracy")
    d = v.delta_halfopen(delta)
    if a >= 1.0:
        return math.inf
    return _log_ratio_bound(a, 1.0 - a, d)


@dataclass(frozen=True)
class AccuracyBound:
    correct: int
    trials: int
    accuracy: float
    confidence: float
    delta: float
    accuracy_lower: float
    epsilon: float  # rigorous lower bound at the confidence level
    epsilon_point: float  # log(a / (1 - a)), not a bound


def accuracy_epsilon_bound(correct: int, trials: int, confidence: float = 0.95, delta: float = 0.0) -> AccuracyBound:
    """Lower bound: accuracy_to_epsilon at the one-sided Clopper-Pearson lower bound of the
    accuracy (the number of correct guesses is Binomial(trials, a) for independent trials)."""
    k, n = _check_kn(correct, trials, "correct", "trials")
    c = v.probability_open(confidence, "confidence")
    d = v.delta_halfopen(delta)
    a_lo = clopper_pearson_lower(k, n, c)
    return AccuracyBound(
        k, n, k / n, c, d, a_lo, accuracy_to_epsilon(a_lo, d), accuracy_to_epsilon(k / n, d)
    )

