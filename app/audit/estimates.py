"""Decisions and estimates: from observations to an empirical epsilon.

Decisions (tight-auditing paper, Section 3.2, "Auditing pipeline"):

* black-box: z = 1 iff the released label is the signal label (``positive``);
* white-box: z = 1 iff the statistic ``noisy[positive] - noisy[negative]``
  (``V_yes - V_no``; with no negative label, minus the largest other score)
  exceeds a threshold tau. tau is chosen on a held-out share of the trials and
  the bound is computed on the rest only, so that the confidence holds (the
  pitfall in PRIOR_ART: a threshold tuned on the counted data voids it).

Estimates, side by side (all from ``app.privacy``):

* TPR/FPR, accuracy and ContextLeak's accuracy epsilon log(a/(1-a))
  (ContextLeak Appendix C.3; a point value, and its Clopper-Pearson lower bound);
* the rigorous (epsilon, delta) lower bound from Clopper-Pearson intervals on
  TPR and FPR (Jagielski et al. 2020; ``epsilon_lower_bound``): valid for every
  (epsilon, delta)-DP mechanism at the stated confidence;
* the GDP mu lower bound mu = Phi^-1(1 - FNR_hi) - Phi^-1(FPR_hi) and its epsilon
  at delta (tight-auditing Section 2): an ESTIMATE, meaningful only where the
  mechanism's trade-off curve is Gaussian (white-box margin of Gaussian voting);
  not a lower bound for argmax outputs (black-box) or Laplace/Gumbel noise;
* epsilon_theory of the target and the ratios.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import special, stats

from app.privacy import accuracy_epsilon_bound, epsilon_lower_bound

THREAT_MODELS = ("black-box", "white-box")
STATISTICS = ("margin", "positive", "reference_vector")
OBJECTIVES = ("epsilon", "mu")


def margin_statistic(noisy: np.ndarray, positive: int, negative: int | None, kind: str = "margin") -> np.ndarray:
    """``margin``: ``noisy[:, positive] - noisy[:, negative]`` (tight-auditing 3.2, V_yes - V_no), or
    minus the largest other score when no negative label is given. ``positive``: the signal label's
    noisy count alone (ContextLeak A.3, "the class 1 logit")."""
    s = np.asarray(noisy, dtype=float)
    if s.ndim == 1:
        s = s[None, :]
    if kind == "positive":
        return s[:, positive].copy()
    if kind != "margin":
        raise ValueError(f"statistic must be one of {STATISTICS}")
    if negative is not None:
        return s[:, positive] - s[:, negative]
    others = np.delete(s, positive, axis=1)
    return s[:, positive] - others.max(axis=1)


# ---------------------------------------------------------------------------
# Threshold selection (vectorised; the chosen threshold is then scored by app.privacy)
# ---------------------------------------------------------------------------


def _cp_lower_direct(k: np.ndarray, n: int | np.ndarray, level: float) -> np.ndarray:
    """``n``: one trial count, or one per element of ``k`` (same values either way)."""
    k, nn = np.broadcast_arrays(np.asarray(k), np.asarray(n))
    out = np.zeros(k.shape, dtype=float)
    pos = k > 0
    out[pos] = special.betaincinv(k[pos], nn[pos] - k[pos] + 1, 1.0 - level)
    return out


def _cp_upper_direct(k: np.ndarray, n: int | np.ndarray, level: float) -> np.ndarray:
    k, nn = np.broadcast_arrays(np.asarray(k), np.asarray(n))
    out = np.ones(k.shape, dtype=float)
    lt = k < nn
    out[lt] = special.betaincinv(k[lt] + 1, nn[lt] - k[lt], level)
    return out


# The planner's power search evaluates the Clopper-Pearson limits of one (n, level) at thousands of counts,
# many of them again and again (a vectorised bisection per design and alternative: POST /v1/audits/plan
# with a default config took ~7-27 s of CPU, mostly in betaincinv). Each count's limit is computed once
# per (n, level) and kept: the same ufunc on the same arguments, so the same numbers
# (tests/audit/test_estimates_cache.py). Racing threads may both fill a count, with the same value.
CP_MEMO_MAX_N = 100_000  # 0.8 MB per (n, level, side) at most; 32 of them kept


@lru_cache(maxsize=32)
def _cp_memo(n: int, level: float, upper: bool) -> np.ndarray:
    return np.full(n + 1, np.nan)


def _cp(k: np.ndarray, n: int | np.ndarray, level: float, upper: bool) -> np.ndarray:
    k = np.asarray(k)
    direct = _cp_upper_direct if upper else _cp_lower_direct
    if np.ndim(n) != 0:  # one count per element: no table to look up
        return direct(k, n, level)
    n = int(n)
    if not (0 <= n <= CP_MEMO_MAX_N and k.size and np.all((k >= 0) & (k <= n))):
        return direct(k, n, level)
    idx = k.astype(np.int64)
    if not np.array_equal(idx, k):  # not counts: nothing to look up
        return direct(k, n, level)
    memo = _cp_memo(n, float(level), upper)
    vals = memo[idx]
    missing = np.isnan(vals)
    if missing.any():
        need = np.unique(idx[missing])
        memo[need] = direct(need.astype(float), n, level)
        vals = memo[idx]
    return vals


def _cp_lower(k: np.ndarray, n: int | np.ndarray, level: float) -> np.ndarray:
    """Clopper-Pearson lower confidence limit (one-sided at ``level``) of a proportion, k of n."""
    return _cp(k, n, level, upper=False)


def _cp_upper(k: np.ndarray, n: int | np.ndarray, level: float) -> np.ndarray:
    """Clopper-Pearson upper confidence limit (one-sided at ``level``) of a proportion, k of n."""
    return _cp(k, n, level, upper=True)


def _log_ratio(num: np.ndarray, den: np.ndarray, delta: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.log((num - delta) / den)
    r = np.where(num - delta <= 0, 0.0, r)
    return np.maximum(r, 0.0)


def bound_curves(
    tp: np.ndarray, n1: int | np.ndarray, fp: np.ndarray, n0: int | np.ndarray, confidence: float, delta: float
) -> tuple[np.ndarray, np.ndarray]:
    """(epsilon lower bound, GDP mu lower bound) for arrays of counts: the formulas of
    ``app.privacy.epsilon_lower_bound`` / ``gdp_mu_lower_bound``, vectorised for threshold search."""
    level = (1.0 + confidence) / 2.0
    tpr_lo = _cp_lower(tp, n1, level)
    fpr_hi = _cp_upper(fp, n0, level)
    tnr_lo = 1.0 - fpr_hi
    fnr_hi = 1.0 - tpr_lo
    eps = np.maximum(_log_ratio(tpr_lo, fpr_hi, delta), _log_ratio(tnr_lo, fnr_hi, delta))
    with np.errstate(invalid="ignore"):
        mu = special.ndtri(tpr_lo) - special.ndtri(fpr_hi)
    mu = np.where(np.isnan(mu), 0.0, np.maximum(mu, 0.0))
    return eps, mu


def select_threshold(
    scores_in: np.ndarray, scores_out: np.ndarray, *, confidence: float, delta: float,
    objective: str = "epsilon", candidates: int = 512,
) -> float:
    """The tau maximising the objective on these (selection) trials: the rigorous epsilon bound, or
    the GDP mu lower bound (tight-auditing 3.2: "maximize mu_emp_lower"). Candidates: quantiles of
    the pooled scores (midpoints between neighbours, so that ties do not straddle)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}")
    a = np.sort(np.asarray(scores_in, dtype=float))
    b = np.sort(np.asarray(scores_out, dtype=float))
    if a.size == 0 or b.size == 0:
        raise ValueError("threshold selection needs trials under both hypotheses")
    pooled = np.unique(np.concatenate([a, b]))
    if pooled.size == 1:
        return float(pooled[0])
    mids = (pooled[:-1] + pooled[1:]) / 2.0
    if mids.size > candidates:
        mids = np.unique(np.quantile(mids, np.linspace(0, 1, candidates)))
    cand = np.concatenate([[pooled[0] - 1.0], mids])
    tp = a.size - np.searchsorted(a, cand, side="right")  # scores > tau
    fp = b.size - np.searchsorted(b, cand, side="right")
    eps, mu = bound_curves(tp, a.size, fp, b.size, confidence, delta)
    obj = eps if objective == "epsilon" else mu
    # Ties: prefer the other objective, then the middle-most candidate (stable choice).
    other = mu if objective == "epsilon" else eps
    best = np.flatnonzero(obj == obj.max())
    best = best[other[best] == other[best].max()]
    return float(cand[best[len(best) // 2]])


# ---------------------------------------------------------------------------
# Estimates
# ---------------------------------------------------------------------------


@dataclass
class Estimates:
    threat_model: str
    tp: int
    fn: int
    fp: int
    tn: int
    confidence: float
    delta: float
    tpr: float
    fpr: float
    accuracy: float
    epsilon_lower: float  # rigorous (Clopper-Pearson), at ``confidence``
    epsilon_lower_direction: str
    epsilon_point: float  # plug-in log((TPR - delta)/FPR), not a bound
    accuracy_epsilon: float  # ContextLeak C.3 point value log(a/(1-a))
    accuracy_epsilon_lower: float  # its Clopper-Pearson lower bound
    gdp_mu_lower: float
    epsilon_gdp: float | None  # ESTIMATE: Gaussian trade-off assumed
    gdp_applicable: bool  # the target's trade-off curve is Gaussian for this statistic
    epsilon_theory: float | None
    ratio_lower_to_theory: float | None
    ratio_gdp_to_theory: float | None
    threshold: float | None = None
    selection_trials: int = 0
    assumptions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, float) and not math.isfinite(v):
                d[k] = None if math.isnan(v) else ("inf" if v > 0 else "-inf")
        return d


def _ratio(x: float | None, theory: float | None) -> float | None:
    if x is None or theory is None or not math.isfinite(theory) or theory <= 0:
        return None
    return float(x) / float(theory)


def estimates_from_guesses(
    guesses: np.ndarray, members: np.ndarray, *, threat_model: str, confidence: float, delta: float,
    epsilon_theory: float | None, gdp_applicable: bool, threshold: float | None = None,
    selection_trials: int = 0, assumptions: Sequence[str] = (),
) -> Estimates:
    g = np.asarray(guesses, dtype=bool)
    m = np.asarray(members, dtype=bool)
    tp = int(np.sum(g & m))
    fn = int(np.sum(~g & m))
    fp = int(np.sum(g & ~m))
    tn = int(np.sum(~g & ~m))
    return estimates_from_counts(tp, fn, fp, tn, threat_model=threat_model, confidence=confidence, delta=delta,
                                 epsilon_theory=epsilon_theory, gdp_applicable=gdp_applicable, threshold=threshold,
                                 selection_trials=selection_trials, assumptions=assumptions)


def estimates_from_counts(
    tp: int, fn: int, fp: int, tn: int, *, threat_model: str, confidence: float, delta: float,
    epsilon_theory: float | None, gdp_applicable: bool, threshold: float | None = None,
    selection_trials: int = 0, assumptions: Sequence[str] = (),
) -> Estimates:
    b = epsilon_lower_bound(tp, fn, fp, tn, confidence=confidence, delta=delta)
    n = tp + fn + fp + tn
    acc = accuracy_epsilon_bound(tp + tn, n, confidence=confidence, delta=delta)
    notes = list(assumptions)
    notes.append("epsilon_lower: rigorous Clopper-Pearson bound at the stated confidence for any "
                 "(epsilon, delta)-DP target, given independent trials and a decision rule fixed before them")
    if not gdp_applicable:
        notes.append("epsilon_gdp: NOT a bound here (the output's trade-off curve is not Gaussian); "
                     "an indication only")
    else:
        notes.append("epsilon_gdp: estimate assuming a Gaussian trade-off curve (tight-auditing Section 2)")
    notes.append("accuracy_epsilon: ContextLeak C.3 log(a/(1-a)); a lower bound only with balanced or "
                 "coin-flip insertion")
    return Estimates(
        threat_model=threat_model, tp=tp, fn=fn, fp=fp, tn=tn, confidence=confidence, delta=delta,
        tpr=b.tpr, fpr=b.fpr, accuracy=acc.accuracy, epsilon_lower=b.epsilon,
        epsilon_lower_direction=b.direction, epsilon_point=b.epsilon_point,
        accuracy_epsilon=acc.epsilon_point, accuracy_epsilon_lower=acc.epsilon,
        gdp_mu_lower=b.gdp_mu_lower, epsilon_gdp=b.epsilon_gdp, gdp_applicable=gdp_applicable,
        epsilon_theory=epsilon_theory, ratio_lower_to_theory=_ratio(b.epsilon, epsilon_theory),
        ratio_gdp_to_theory=_ratio(b.epsilon_gdp, epsilon_theory), threshold=threshold,
        selection_trials=selection_trials, assumptions=notes,
    )


def split_selection(n: int, fraction: float, members: np.ndarray) -> np.ndarray:
    """Boolean mask of the trials used to choose the threshold: the first ``fraction`` of the
    trials in order (trials are i.i.d. in random order, so a prefix is a random subset), grown if
    needed so that both hypotheses are represented."""
    if not 0.0 < fraction < 1.0:
        raise ValueError("threshold_fraction must lie in (0, 1)")
    k = max(1, int(round(n * fraction)))
    mask = np.zeros(n, dtype=bool)
    mask[:k] = True
    m = np.asarray(members, dtype=bool)
    while k < n - 1 and not (m[:k].any() and (~m[:k]).any()):
        k += 1
        mask[:k] = True
    return mask


# P(the white-box counted split holds one hypothesis only) above which a design is refused (at
# submit, app.jobs.kinds.canary_design) or not planned (app.audit.gen_power)
SPLIT_FAILURE = 1e-3


def split_failure_probability(trials: int, fraction: float) -> float:
    """Paired insertion shuffles trials // 2 members among 2 (trials // 2) trials; the threshold is
    chosen on the first round(n x fraction) and evaluated on the rest (``split_selection``).
    The probability that the rest holds only one hypothesis: 2 x hypergeometric P(all c of one kind)."""
    half = trials // 2
    n = 2 * half
    c = n - max(1, int(round(n * fraction)))
    if c < 1 or half < 1:
        return 1.0
    return min(1.0, 2.0 * float(stats.hypergeom.pmf(c, n, half, c)))


def min_split_trials(fraction: float, limit: float = SPLIT_FAILURE) -> int:
    """The fewest (even) trials whose white-box split fails with probability <= ``limit``."""
    n = 2
    while split_failure_probability(n, fraction) > limit and n < 10_000:
        n += 2
    return n


def reference_vector_statistic(vectors: np.ndarray, members: np.ndarray, selection: np.ndarray) -> np.ndarray:
    """Projection of each noisy vector on v = mean(member) - mean(non-member) over the selection
    trials only (Choi et al.; ContextLeak A.4, Figure 13), so that the counted trials never
    shaped the statistic."""
    x = np.asarray(vectors, dtype=float)
    m = np.asarray(members, dtype=bool)
    sel = np.asarray(selection, dtype=bool)
    if not ((sel & m).any() and (sel & ~m).any()):
        raise ValueError("too few trials: the selection split lacks one hypothesis")
    v = x[sel & m].mean(axis=0) - x[sel & ~m].mean(axis=0)
    return x @ v


def white_box_estimates(
    statistic: np.ndarray, members: np.ndarray, *, confidence: float, delta: float, epsilon_theory: float | None,
    gdp_applicable: bool, threshold_fraction: float = 0.5, objective: str = "epsilon",
    assumptions: Sequence[str] = (), threat_model: str = "white-box",
) -> Estimates:
    """Threshold chosen on the first ``threshold_fraction`` of the trials, counted on the rest
    (also the black-box repeat attack, whose score is thresholded the same way)."""
    s = np.asarray(statistic, dtype=float)
    m = np.asarray(members, dtype=bool)
    sel = split_selection(s.size, threshold_fraction, m)
    ev = ~sel
    if not (m[ev].any() and (~m[ev]).any()):
        raise ValueError("too few trials: the counted split lacks one hypothesis")
    tau = select_threshold(s[sel & m], s[sel & ~m], confidence=confidence, delta=delta, objective=objective)
    return estimates_from_guesses(s[ev] > tau, m[ev], threat_model=threat_model, confidence=confidence, delta=delta,
                                  epsilon_theory=epsilon_theory, gdp_applicable=gdp_applicable, threshold=tau,
                                  selection_trials=int(sel.sum()), assumptions=assumptions)
