"""Privacy-loss-distribution (PLD) composition of Gaussian and pure-epsilon events, in closed form.

A mechanism M is dominated by a pair (P, Q) when its hockey-stick divergences never exceed
those of (P, Q); dominating pairs compose by product, also adaptively (Zhu, Dong & Wang 2022,
Thm 10), and the composition is (eps, delta)-DP with

    delta(eps) = E_{L ~ PLD}[(1 - e^{eps - L})_+]        (Zhu et al. 2022, Eq. 1; Sommer et al. 2019)

where L = log P(o)/Q(o), o ~ P, is the privacy loss. The two kinds of event here have exact pairs:

* Gaussian noise sigma on a query of L2 sensitivity Delta: N(0, 1) vs N(mu, 1), mu = Delta / sigma
  (Dong, Roth & Su 2022, Thm 2.7). k such events compose to mu = sqrt(sum mu_i^2) exactly
  (ibid. Cor. 3.3): L ~ N(mu^2/2, mu^2), and E[(1 - e^{e - L})_+] = Phi(-e/mu + mu/2) - e^e Phi(-e/mu - mu/2)
  for every real e (Balle & Wang 2018, Thm 8).
* any pure eps-DP event (Laplace report-noisy-max, randomized response, ...): binary randomized
  response, L = +eps w.p. e^eps/(1+e^eps), else -eps (Kairouz, Oh & Viswanath 2015, Thm 3.3;
  Murtagh & Vadhan 2016). k identical ones compose to L = eps (2J - k), J ~ Binomial(k, e^eps/(1+e^eps)).

So a history of Gaussian and pure events is summarised by its counts per event type, and the
composed delta(eps) is a finite sum over the discrete (pure) part of the Gaussian tail -- exact
when the pure events share one epsilon. Several pure epsilons are combined on a grid of width h,
each type's loss rounded *up* (pointwise larger loss, so delta(eps), increasing in L, is an upper
bound: the pessimistic estimate of Meiser & Mohammadi 2018 / dp_accounting), error <= h per type.
Binomial tails beyond 12 standard deviations are dropped and their whole mass added to delta
(each outcome adds at most its probability). Nothing here discretises the Gaussian part.

The state is the count per type (``counts``: key -> count), so one more charge recomposes
nothing: the per-(type, count) binomials are cached and the conversion is one root solve.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import optimize, special, stats

from app.privacy.errors import PrivacyInputError


class HistoryTooLarge(PrivacyInputError):
    """The Gaussian part of a history overflows float64 (sum of mu^2 is inf: a charge at epsilon 1e308): the PLD
    route has no finite bound. The ledger takes it as epsilon inf on that route (app.budget.composition)."""

KINDS = ("gaussian", "pure")
GRID = 1e-4  # loss grid width when several pure epsilons are combined (error <= GRID per type)
MAX_GRID_POINTS = 4_000_000
MAX_PURE_TYPES = 64  # beyond: epsilons rounded up onto a 2^(1/256) geometric grid first
MAX_COUNT = 10**9
_TAIL_SD = 12.0


def _param(x: Any, name: str, *, allow_zero: bool = False) -> float:
    """A finite, normal (not subnormal), non-negative float; PrivacyInputError otherwise."""
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise PrivacyInputError(f"must be a number, got {type(x).__name__}", param=name)
    f = float(x)
    if not math.isfinite(f):
        raise PrivacyInputError(f"must be finite, got {f}", param=name)
    if f < 0 or (f == 0 and not allow_zero):
        raise PrivacyInputError(f"must be {'>= 0' if allow_zero else '> 0'}, got {f:g}", param=name)
    if f != 0 and abs(f) < sys.float_info.min:
        raise PrivacyInputError(f"is subnormal ({f!r})", param=name)
    return f


def _count(k: Any, name: str = "count") -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise PrivacyInputError(f"must be an integer, got {type(k).__name__}", param=name)
    if not 1 <= int(k) <= MAX_COUNT:
        raise PrivacyInputError(f"must lie in [1, {MAX_COUNT}], got {int(k)}", param=name)
    return int(k)


@dataclass(frozen=True)
class PldSpec:
    """An event with an exact dominating pair: ``kind`` gaussian (parameter mu = Delta/sigma) or pure
    (parameter eps), repeated ``count`` times."""

    kind: str
    parameter: float
    count: int = 1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise PrivacyInputError(f"unknown PLD kind {self.kind!r}", param="pld.kind")
        object.__setattr__(self, "parameter", _param(self.parameter, "pld.parameter"))
        object.__setattr__(self, "count", _count(self.count, "pld.count"))

    @property
    def key(self) -> str:
        """The state key: events with one key are interchangeable (float.hex: exact, round-trips)."""
        return f"{self.kind}:{float(self.parameter).hex()}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "parameter": self.parameter, "count": self.count}

    @classmethod
    def from_dict(cls, d: Any) -> PldSpec:
        if not isinstance(d, Mapping):
            raise PrivacyInputError("must be an object", param="pld")
        return cls(str(d.get("kind")), _param(d.get("parameter"), "pld.parameter"), _count(d.get("count", 1), "pld.count"))


def parse_key(key: str) -> tuple[str, float]:
    kind, _, hexval = str(key).partition(":")
    if kind not in KINDS:
        raise PrivacyInputError(f"unknown PLD state key {key!r}", param="pld_counts")
    try:
        value = float.fromhex(hexval)
    except (ValueError, OverflowError):
        raise PrivacyInputError(f"bad PLD state key {key!r}", param="pld_counts") from None
    return kind, _param(value, "pld_counts")


@dataclass(frozen=True)
class _Discrete:
    """The pure part: loss values, their probabilities, and the mass left out (added to delta)."""

    losses: np.ndarray
    probs: np.ndarray
    dropped: float

    @property
    def log_probs(self) -> np.ndarray:
        lp = self.__dict__.get("_log_probs")
        if lp is None:
            with np.errstate(divide="ignore"):
                lp = np.log(self.probs)
            object.__setattr__(self, "_log_probs", lp)
        return lp

    def _cums(self) -> tuple[np.ndarray, np.ndarray]:
        got = self.__dict__.get("_cums_")
        if got is None:
            z = np.zeros(1)
            # Inflated by 1e-12: float summation never makes these bounds smaller than the true masses.
            got = (np.concatenate([z, np.cumsum(self.probs)]) * (1 + 1e-12),
                   np.concatenate([np.cumsum(self.probs[::-1])[::-1], z]) * (1 + 1e-12))
            object.__setattr__(self, "_cums_", got)
        return got

    def mass_below(self, i: int) -> float:
        """Total probability of atoms [0, i) (rounded up)."""
        return float(self._cums()[0][i])

    def mass_from(self, i: int) -> float:
        """Total probability of atoms [i, n) (rounded up)."""
        return float(self._cums()[1][i])


_POINT = _Discrete(np.zeros(1), np.ones(1), 0.0)


@lru_cache(maxsize=512)
def _binomial(eps: float, k: int) -> _Discrete:
    """k-fold randomized response at eps: L = eps (2J - k), J ~ Bin(k, p), p = e^eps/(1+e^eps)
    (Kairouz et al. 2015, Thm 3.3), within 12 standard deviations; the rest is ``dropped``."""
    p = float(special.expit(eps))
    m, sd = k * p, math.sqrt(k * p * (1.0 - p))
    lo = max(0, int(math.floor(m - _TAIL_SD * sd)) - 10)
    hi = min(k, int(math.ceil(m + _TAIL_SD * sd)) + 10)
    j = np.arange(lo, hi + 1, dtype=float)
    probs = np.exp(stats.binom.logpmf(j, k, p))
    dropped = (float(stats.binom.cdf(lo - 1, k, p)) if lo > 0 else 0.0) + float(stats.binom.sf(hi, k, p))
    return _Discrete(eps * (2.0 * j - k), probs, dropped)


def _grid_index(losses: np.ndarray, h: float) -> np.ndarray:
    """Every loss rounded *up* to a multiple of h (a hair more: float division never rounds down)."""
    return np.ceil(losses / h + 1e-6).astype(np.int64)


_PRUNE = 1e-40  # cells below this mass are dropped (their mass goes to ``dropped``)


MAX_PAIRS = 4_000_000  # atoms x atoms per sparse convolution step; beyond, the grid is coarsened


def _merge(idx: np.ndarray, mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    uniq, inv = np.unique(idx, return_inverse=True)
    return uniq, np.bincount(inv, weights=mass)


def _combine(i1: np.ndarray, p1: np.ndarray, i2: np.ndarray, p2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distribution of the sum of two independent grid losses (exact sparse convolution)."""
    return _merge((i1[:, None] + i2[None, :]).ravel(), (p1[:, None] * p2[None, :]).ravel())


def _coarsen(idx: np.ndarray, mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Halve the grid: every index rounded *up* (losses only grow: still an upper bound)."""
    return _merge(-np.floor_divide(-idx, 2), mass)


@lru_cache(maxsize=64)
def _pure_part(types: tuple[tuple[float, int], ...]) -> _Discrete:
    """The composition of the pure types (eps, count), sorted; exact for one type."""
    if not types:
        return _POINT
    parts = [_binomial(e, k) for e, k in types]
    if len(parts) == 1:
        return parts[0]
    width = sum(float(p.losses[-1] - p.losses[0]) + 2.0 * e for p, (e, _) in zip(parts, types))
    h = max(GRID, width / MAX_GRID_POINTS)
    idx, mass = _grid_index(parts[0].losses, h), parts[0].probs
    dropped = sum(p.dropped for p in parts)
    for part in parts[1:]:
        i2, p2 = _merge(_grid_index(part.losses, h), part.probs)
        for _ in range(64):  # bounded: each halving at least halves the distinct indices of a wide grid
            if idx.size * i2.size <= MAX_PAIRS:
                break
            h *= 2.0
            (idx, mass), (i2, p2) = _coarsen(idx, mass), _coarsen(i2, p2)
        idx, mass = _combine(idx, mass, i2, p2)
        keep = mass >= _PRUNE
        dropped += float(np.sum(mass[~keep]))
        idx, mass = idx[keep], mass[keep]
    return _Discrete(idx * h, mass, dropped)


def _quantise(types: dict[float, int]) -> dict[float, int]:
    """Too many distinct epsilons: round each up onto 2^(j/256) (an eps-DP event is eps'-DP for eps' >= eps)."""
    if len(types) <= MAX_PURE_TYPES:
        return types
    out: dict[float, int] = {}
    for e, k in types.items():
        q = 2.0 ** (math.ceil(256.0 * math.log2(e) + 1e-9) / 256.0)
        q = max(q, e)
        out[q] = out.get(q, 0) + k
    return out


def _logsumexp(x: np.ndarray) -> float:
    m = float(np.max(x))
    if not math.isfinite(m):
        return m if m > 0 else -math.inf
    return m + math.log(float(np.sum(np.exp(x - m))))


@dataclass(frozen=True)
class Composed:
    """A composed history: Gaussian mu (all Gaussian events at once) and the pure part."""

    mu: float
    pure: _Discrete

    @property
    def empty(self) -> bool:
        return self.mu == 0.0 and self.pure is _POINT

    def log_delta(self, eps: float) -> float:
        """log delta(eps) (module docstring), from log-CDFs so that tails do not underflow.

        With a Gaussian part only atoms within c = mu^2/2 + 14 mu of eps are evaluated: an atom
        below adds at most Phi(-14) of its mass (delta_G(e) <= Phi(-e/mu + mu/2), decreasing in e),
        one above at most its mass (delta_G <= 1); both bounds are added, so this stays an upper bound."""
        d = self.pure
        if d is _POINT and self.mu > 0.0:
            c = self.mu * self.mu / 2.0 + 14.0 * self.mu
            if -c <= eps < c:
                # A Gaussian-only history inside the window (one atom at 0, none above or below it):
                # the general branch's operations on one element, without its array bookkeeping (an
                # answer's budget check solves for eps with ~13 of these; issue 27). Same float ops,
                # same result bit for bit (tests/privacy/test_pld_gaussian_fast_path.py).
                mu = self.mu
                la = special.log_ndtr(-eps / mu + mu / 2.0)
                lb = eps + special.log_ndtr(-eps / mu - mu / 2.0)
                if not lb < la:
                    return -math.inf
                return float(la + np.log1p(-np.exp(np.minimum(lb - la, 0.0))))
        parts: list[float] = []
        if self.mu == 0.0:
            lo, hi = int(np.searchsorted(d.losses, eps, side="right")), d.losses.size
            e = eps - d.losses[lo:hi]
            with np.errstate(divide="ignore"):
                terms = np.log(-np.expm1(np.minimum(e, 0.0)))
        else:
            mu = self.mu
            c = mu * mu / 2.0 + 14.0 * mu
            lo = int(np.searchsorted(d.losses, eps - c, side="right"))
            hi = int(np.searchsorted(d.losses, eps + c, side="right"))
            e = eps - d.losses[lo:hi]
            la = special.log_ndtr(-e / mu + mu / 2.0)
            lb = e + special.log_ndtr(-e / mu - mu / 2.0)
            with np.errstate(divide="ignore", invalid="ignore"):
                terms = np.where(lb < la, la + np.log1p(-np.exp(np.minimum(lb - la, 0.0))), -np.inf)
            below, above = d.mass_below(lo), d.mass_from(hi)
            if below > 0.0:
                parts.append(math.log(below) + float(special.log_ndtr(-14.0)))
            if above > 0.0:
                parts.append(math.log(above))
        if hi > lo:
            parts.append(_logsumexp(terms + d.log_probs[lo:hi]))
        if d.dropped > 0.0:
            parts.append(math.log(d.dropped))
        return _logsumexp(np.array(parts)) if parts else -math.inf

    def delta(self, eps: float) -> float:
        return math.exp(self.log_delta(eps))

    @property
    def gaussian_only(self) -> bool:
        """Only a Gaussian part (mu > 0, no pure events): ``log_delta_gaussian`` applies."""
        return self.mu > 0.0 and self.pure is _POINT

    def log_delta_gaussian(self, eps: np.ndarray) -> np.ndarray:
        """``log_delta`` at many points at once, for a Gaussian-only history (``gaussian_only``).

        The same elementwise operations as ``log_delta`` (one atom at 0: Balle & Wang's formula for
        |eps| <= c, the Phi(-14) bound above c, delta = 1 below -c), vectorised for the delta-split search."""
        assert self.gaussian_only
        mu = self.mu
        c = mu * mu / 2.0 + 14.0 * mu
        e = np.asarray(eps, dtype=float)
        la = special.log_ndtr(-e / mu + mu / 2.0)
        lb = e + special.log_ndtr(-e / mu - mu / 2.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.where(lb < la, la + np.log1p(-np.exp(np.minimum(lb - la, 0.0))), -np.inf)
        out = np.where(e >= c, math.log(self.pure.mass_below(1)) + float(special.log_ndtr(-14.0)), out)
        return np.where(e < -c, math.log(self.pure.mass_from(0)), out)

    def epsilon(self, delta: float, rtol: float = 4 * np.finfo(float).eps) -> float:
        """The smallest eps >= 0 with delta(eps) <= delta (to relative ``rtol``, nudged up until that
        holds in floating point: never below the truth); inf when the dropped tail alone exceeds delta."""
        if self.empty:
            return 0.0
        target = math.log(delta) - 1e-12  # a hair below: float error in the sum never flips the test
        if self.log_delta(0.0) <= target:
            return 0.0
        if self.pure.dropped >= delta:
            return math.inf
        hi = float(self.pure.losses[-1]) + self.mu * self.mu / 2.0 + self.mu * math.sqrt(
            2.0 * math.log(2.0 / delta)) + 1.0
        for _ in range(200):  # bracket (delta(eps) decreases to ``dropped`` < delta)
            if self.log_delta(hi) <= target:
                break
            hi *= 2.0
        else:
            return math.inf

        def f(e: float) -> float:
            return max(self.log_delta(e), -1e4) - target

        e = float(optimize.brentq(f, 0.0, hi, xtol=1e-12, rtol=max(rtol, 4 * np.finfo(float).eps), maxiter=200))
        step = max(e * 1e-12, 1e-15)
        for _ in range(200):  # doubling steps: any gap left by the solver's tolerance is closed
            if f(e) <= 0.0:
                return e
            e, step = e + step, 2.0 * step
        return hi


def compose_counts(counts: Mapping[str, int]) -> Composed:
    """The composition of a history given as counts per ``PldSpec.key``."""
    if not isinstance(counts, Mapping):
        raise PrivacyInputError("must be an object", param="pld_counts")
    mu2 = 0.0
    pure: dict[float, int] = {}
    for key in sorted(counts):
        kind, value = parse_key(key)
        k = int(counts[key])
        if k < 0 or k > MAX_COUNT:
            raise PrivacyInputError(f"count out of range for {key!r}", param="pld_counts")
        if k == 0:
            continue
        if kind == "gaussian":
            mu2 += k * value * value
        else:
            pure[value] = pure.get(value, 0) + k
    pure = _quantise(pure)
    types = tuple(sorted(pure.items()))
    mu = math.sqrt(mu2)
    if not math.isfinite(mu):
        raise HistoryTooLarge("Gaussian history too large", param="pld_counts")
    return Composed(mu, _pure_part(types))


def pld_epsilon(counts: Mapping[str, int], delta: float) -> float:
    """epsilon at ``delta`` of the history ``counts`` (an upper bound, exact for one pure epsilon)."""
    d = _param(delta, "delta")
    if d >= 1.0:
        raise PrivacyInputError(f"must lie in (0, 1), got {d:g}", param="delta")
    return compose_counts(counts).epsilon(d)


def pld_delta(counts: Mapping[str, int], epsilon: float) -> float:
    """delta at ``epsilon`` of the history ``counts`` (an upper bound)."""
    e = _param(epsilon, "epsilon", allow_zero=True)
    return min(1.0, compose_counts(counts).delta(e))


def add_counts(counts: Mapping[str, int], spec: PldSpec, times: int = 1) -> dict[str, int]:
    """``counts`` with ``times`` more ``spec`` events (a new dict)."""
    out = dict(counts)
    out[spec.key] = int(out.get(spec.key, 0)) + spec.count * int(times)
    return out


__all__ = ["Composed", "PldSpec", "add_counts", "compose_counts", "parse_key", "pld_delta", "pld_epsilon"]
