"""Noise conformance: does the target add the noise its claim promises?

A bootstrap that re-applies the auditor's own noise to a gateway's clean votes
never observes the gateway's noise (a gateway that adds none passes it). Where
the target reports its clean and noisy scores (white-box internals), the
residuals ``noisy - clean`` of a correct report-noisy-max are i.i.d. draws of
the claimed noise on EVERY label, and the released label is their argmax. Tests,
at overall level alpha = 1 - confidence (Bonferroni over the two random ones):

1. consistency (deterministic): released label == argmax(noisy scores);
2. no exact zeros (deterministic): a continuous noise is never exactly 0, so a
   zero residual means a score got no noise (winner-only, no noise);
3. scale (alpha/2): the sum of a scale-sensitive transform is an exact pivot —
   Gaussian sum z^2 ~ chi2(m); Laplace sum |z| ~ Gamma(m, 1); Gumbel(0, 1)
   sum exp(-z) ~ Gamma(m, 1) (exp(-G) ~ Exp(1)) — two-sided;
4. shape (alpha/2): Kolmogorov-Smirnov of z against the claimed law.

What it shows: that the REPORTED scores match the claim. A gateway that lies
about its internals (reports fabricated clean votes) defeats it; the black-box
bound is the check that needs no trust. The power against a scale alternative
(noise x m) is exact from the same pivots.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from app.audit.noise import VotingNoise

_LAWS = {"gaussian": stats.norm, "laplace": stats.laplace, "gumbel": stats.gumbel_r}


@dataclass(frozen=True)
class _Law:
    """``dist(shape)`` without scipy's frozen distribution: ``rv_frozen.cdf(x)`` is ``dist.cdf(x, shape)``
    (the same call, the same value), but freezing builds a docstring, ~1 ms per test of a white-box run."""

    dist: Any
    shape: int

    def cdf(self, x: float) -> float:
        return self.dist.cdf(x, self.shape)

    def sf(self, x: float) -> float:
        return self.dist.sf(x, self.shape)


def _pivot(z: np.ndarray, kind: str) -> tuple[float, _Law]:
    """(statistic, its null law) for residuals z standardised by the claimed scale."""
    m = z.size
    if kind == "gaussian":
        return float(np.sum(z * z)), _Law(stats.chi2, m)
    if kind == "laplace":
        return float(np.sum(np.abs(z))), _Law(stats.gamma, m)
    if kind == "gumbel":
        return float(np.sum(np.exp(-z))), _Law(stats.gamma, m)
    raise ValueError(f"unknown noise {kind!r}")


def _two_sided(stat: float, law: Any) -> float:
    return float(min(1.0, 2.0 * min(law.cdf(stat), law.sf(stat))))


@dataclass
class ConformanceResult:
    calls: int
    residuals: int
    noise: str
    claimed_scale: float
    conformant: bool
    alpha: float
    inconsistent_releases: int  # released label != argmax(noisy scores)
    zero_residuals: int  # scores that got no noise
    scale_ratio: float | None  # estimated applied/claimed scale
    scale_p_value: float | None
    ks_p_value: float | None
    findings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def scale_ratio_estimate(z: np.ndarray, kind: str) -> float:
    """Method-of-moments estimate of (applied scale / claimed scale) from standardised residuals."""
    if kind == "gaussian":
        return float(math.sqrt(np.mean(z * z)))
    if kind == "laplace":
        return float(np.mean(np.abs(z)))
    # Gumbel(0, s): E = gamma s; with s = 1 claimed, the mean is the scale times Euler's gamma.
    return float(np.mean(z) / np.euler_gamma)


def noise_conformance(clean: Sequence[Sequence[float]] | np.ndarray, noisy: Sequence[Sequence[float]] | np.ndarray,
                      released_index: Sequence[int] | None, noise: VotingNoise, *,
                      confidence: float = 0.95) -> ConformanceResult:
    """Test reported (clean, noisy) score vectors of n calls against the claimed ``noise``."""
    c = np.atleast_2d(np.asarray(clean, dtype=float))
    y = np.atleast_2d(np.asarray(noisy, dtype=float))
    if c.shape != y.shape or c.size == 0:
        raise ValueError("clean and noisy scores must be non-empty and of the same shape")
    alpha = 1.0 - confidence
    s = float(noise.scale)  # the claimed scale
    r = y - c
    zeros = int(np.count_nonzero(np.abs(r) <= 1e-12 * np.maximum(1.0, np.abs(c))))
    findings = []
    inconsistent = 0
    if released_index is not None:
        rel = np.asarray(released_index, dtype=int)
        inconsistent = int(np.count_nonzero(rel != np.argmax(y, axis=1)))
        if inconsistent:
            findings.append(f"{inconsistent} of {len(rel)} released labels are not the argmax of the reported "
                            "noisy scores")
    if zeros:
        findings.append(f"{zeros} of {r.size} scores got no noise (a continuous noise is never exactly 0): "
                        "noise missing on some labels (e.g. winner-only) or everywhere")
    z = (r / s).ravel()
    nonzero = z[np.abs(r.ravel()) > 1e-12 * np.maximum(1.0, np.abs(c.ravel()))]
    scale_p = ks_p = ratio = None
    if nonzero.size >= 2:
        stat, law = _pivot(nonzero, noise.kind)
        scale_p = _two_sided(stat, law)
        ks_p = float(stats.kstest(nonzero, _LAWS[noise.kind].cdf).pvalue)
        ratio = scale_ratio_estimate(nonzero, noise.kind)
        if scale_p < alpha / 2:
            findings.append(f"noise scale x{ratio:.3g} of the claimed {noise.kind} scale {s:.4g} "
                            f"(p = {scale_p:.2g} < {alpha / 2:.2g})")
        if ks_p < alpha / 2:
            findings.append(f"residuals do not follow the claimed {noise.kind} law (KS p = {ks_p:.2g})")
    return ConformanceResult(c.shape[0], int(r.size), noise.kind, s, not findings, alpha, inconsistent, zeros, ratio,
                             scale_p, ks_p, findings)


def conformance_power(noise_kind: str, residuals: int, multiplier: float, *, confidence: float = 0.95,
                      winner_only: bool = False) -> float:
    """P(the conformance test flags the alternative) with ``residuals`` scores. Noise on the winner
    only or no noise: 1 (a zero residual is certain with >= 2 labels). Scale x m: exact power of the
    two-sided pivot test at alpha/2 (the KS test only adds power)."""
    if residuals < 2:
        return 0.0
    if winner_only or multiplier == 0.0:
        return 1.0
    alpha = (1.0 - confidence) / 2.0
    m = residuals
    if noise_kind == "gaussian":  # sum (m_s Z)^2 = m_s^2 chi2(m)
        law = stats.chi2(m)
        lo, hi = law.ppf(alpha / 2), law.isf(alpha / 2)
        return float(law.cdf(lo / multiplier**2) + law.sf(hi / multiplier**2))
    if noise_kind == "laplace":  # sum |m_s L| = m_s Gamma(m)
        law = stats.gamma(m)
        lo, hi = law.ppf(alpha / 2), law.isf(alpha / 2)
        return float(law.cdf(lo / multiplier) + law.sf(hi / multiplier))
    # Gumbel: exp(-m_s G) has no closed law; Monte Carlo with a fixed seed.
    rng = np.random.default_rng(0)
    law = stats.gamma(m)
    lo, hi = law.ppf(alpha / 2), law.isf(alpha / 2)
    draws = np.exp(-multiplier * rng.gumbel(size=(4000, m))).sum(axis=1)
    return float(np.mean((draws < lo) | (draws > hi)))


# ---------------------------------------------------------------------------
# Black-box: the release floor (needs no internals and no model assumption)
# ---------------------------------------------------------------------------


def min_release_probability(noise: VotingNoise, partitions: int, labels: int = 2) -> float:
    """The least probability with which report-noisy-max over ``labels`` labels releases a given
    label, over every vote split of T partitions (the claimed noise z i.i.d. on every label).

    P(j released | votes v) = E_z[prod_{i != j} F(z - v_i + v_j)] with z ~ f, F the noise's law. It
    falls as votes move from j to any other label, and it is log-concave in v (f and F are log-concave
    for Gaussian, Laplace and Gumbel noise; Prekopa: a log-concave integrand's marginal is log-concave),
    so quasi-concave: over the simplex of the T votes its least value is at a vertex, all T votes on
    one other label: floor = E_z[F(z - T) F(z)^(k - 2)]. Two labels, closed forms of the difference
    of two i.i.d. draws: Gaussian N(0, 2 s^2) -> Phi(-T / (s sqrt 2)); Laplace(b) ->
    e^(-T/b) (1 + T/(2b)) / 2; Gumbel(b) -> logistic(0, b): 1 / (1 + e^(T/b)). Gumbel, any k (the
    Gumbel-max trick: a softmax of v/b): 1 / (e^(T/b) + k - 1). Gaussian and Laplace, k > 2: the
    one-dimensional integral by adaptive quadrature (scipy ``quad``, absolute error <= 1e-12), cached
    (the planner asks for the same floor at every trial count it tries)."""
    if int(labels) < 2:
        raise ValueError("the release floor needs >= 2 labels")
    return _floor(noise.kind, float(noise.scale), float(partitions), int(labels))


@functools.lru_cache(maxsize=1024)
def _floor(kind: str, s: float, t: float, k: int) -> float:
    if kind == "gumbel":
        return float(stats.logistic.sf(t / s)) if k == 2 else float(1.0 / (math.exp(min(t / s, 700.0)) + k - 1))
    if kind == "gaussian":
        if k == 2:
            return float(stats.norm.sf(t / (s * math.sqrt(2.0))))
        root = s * math.sqrt(2.0)

        def pdf(z: float) -> float:
            return math.exp(-0.5 * (z / s) ** 2) / (s * math.sqrt(2.0 * math.pi))

        def cdf(x: float) -> float:
            return 0.5 * math.erfc(-x / root)
    elif kind == "laplace":
        if k == 2:
            return float(0.5 * math.exp(-t / s) * (1.0 + t / (2.0 * s)))

        def pdf(z: float) -> float:
            return math.exp(-abs(z) / s) / (2.0 * s)

        def cdf(x: float) -> float:
            return 0.5 * math.exp(x / s) if x < 0 else 1.0 - 0.5 * math.exp(-x / s)
    else:
        raise ValueError(f"unknown noise {kind!r}")
    from scipy import integrate

    def integrand(z: float) -> float:
        return pdf(z) * cdf(z - t) * cdf(z) ** (k - 2)

    # the integrand lives where z is above T - a few scales and below a few scales past it
    val, _ = integrate.quad(integrand, -40.0 * s, t + 40.0 * s, points=[0.0, t], epsabs=1e-12, epsrel=1e-10,
                            limit=200)
    return float(min(max(val, 0.0), 1.0 / k))


@dataclass
class ReleaseFloorResult:
    """Each label's release count against the floor any correct implementation reaches."""

    calls: int
    partitions: int
    floor: float  # least P(release l) per call under the claim
    counts: list[int]
    threshold: int  # a count below this rejects at level alpha (per label, Bonferroni over the labels)
    alpha: float
    conformant: bool
    findings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def conformance_confidence(confidence: float) -> float:
    """The conformance tests share one more 1 - confidence (half each): a correct target is called a
    violation with probability <= 2 (1 - confidence) overall (the bound's plus theirs)."""
    return 1.0 - (1.0 - confidence) / 2.0


def release_floor_threshold(noise: VotingNoise, partitions: int, n: int, *, confidence: float,
                            labels: int = 2) -> int:
    """The release floor test's cut-off for ``n`` released labels: the smallest k with
    P(Bin(n, floor) < k) <= alpha / labels (counts < k reject; Bonferroni over the labels). The test
    and the power model (``app.audit.power.design_power``) both call this."""
    a = (1.0 - confidence) / int(labels)
    floor = min_release_probability(noise, partitions, labels)
    k = int(stats.binom.ppf(a, n, floor))
    if stats.binom.cdf(k - 1, n, floor) > a:  # guard the discrete edge
        k -= 1
    return k


def release_floor(released_index: Sequence[int], labels: Sequence[str], noise: VotingNoise, partitions: int, *,
                  confidence: float = 0.95) -> ReleaseFloorResult:
    """One-sided binomial test per label: under the claim every call releases label l with
    probability >= ``floor`` whatever the model and the context, so the count of l stochastically
    dominates Bin(n, floor); a count below its alpha/k quantile rejects (Bonferroni over the k
    labels). Catches a release that is too deterministic for the claimed noise (no noise, noise too
    small, noise on the winner only: with a decoy label, one no exemplar carries, it is never
    released) from the released labels alone."""
    nl = len(labels)
    if nl < 2:
        raise ValueError("the release floor needs >= 2 labels")
    rel = np.asarray(released_index, dtype=int)
    n = int(rel.size)
    alpha = 1.0 - confidence
    floor = min_release_probability(noise, partitions, nl)
    k = release_floor_threshold(noise, partitions, n, confidence=confidence, labels=nl)
    counts = [int(np.count_nonzero(rel == i)) for i in range(nl)]
    of = "0, 1" if nl == 2 else f"0..{nl - 1}"
    # A label by its index in the query's labels (the result's attack.labels), never its text: a label may be
    # caller text (a generation record's output, a label that is not a declared class label).
    findings = [f"the query's label {i} (of {of}) released {c} of {n} times; with {partitions} partitions and the claimed "
                f"{noise.kind} noise (scale {noise.scale:.4g}) every call releases it with probability >= "
                f"{floor:.3g}, so fewer than {k} releases has probability <= {alpha / nl:.2g}: the releases are "
                "too deterministic for the claimed noise" for i, c in enumerate(counts) if c < k]
    return ReleaseFloorResult(n, int(partitions), floor, counts, k, alpha, not findings, findings)


def release_floor_power(tpr: float, fpr: float, n1: int, n0: int, threshold: int, *, both: bool = True) -> float:
    """P(some label's count < threshold) when the positive label's count is Bin(n1, tpr) +
    Bin(n0, fpr) (the other label's is n - that; ``both=False``: that label's count alone, for
    queries of more than two labels): exact by convolution over each binomial's
    support beyond 1e-12 tails."""
    if threshold <= 0:
        return 0.0

    def part(n: int, p: float) -> tuple[int, np.ndarray]:
        if p <= 0.0 or p >= 1.0 or n == 0:
            k = 0 if p <= 0.0 else n
            return k, np.ones(1)
        lo = max(0, int(stats.binom.ppf(1e-12, n, p)) - 1)
        hi = min(n, int(stats.binom.isf(1e-12, n, p)) + 1)
        return lo, stats.binom.pmf(np.arange(lo, hi + 1), n, p)

    lo1, a = part(n1, float(np.clip(tpr, 0, 1)))
    lo0, b = part(n0, float(np.clip(fpr, 0, 1)))
    pmf = np.convolve(a, b)  # count of the positive label, from lo1 + lo0
    k = lo1 + lo0 + np.arange(pmf.size)
    n = n1 + n0
    reject = ((k < threshold) | (n - k < threshold)) if both else (k < threshold)
    return float(np.clip(pmf[reject].sum(), 0.0, 1.0))
