"""E-processes for the sequential audits (``app.audit.sequential``): bettors, and likelihood ratios
of the white-box noise.

Every process here is a nonnegative supermartingale under its null with initial value 1, so by
Ville's inequality P(sup_t E_t >= 1/alpha) <= alpha (González, Dulce-Rubio, Ramdas & Ribero,
"Sequentially Auditing Differential Privacy", NeurIPS 2025, Section 3: e-values and test
supermartingales). A fixed-weight average of processes on one filtration is one; so is a product
of processes that move on disjoint steps (each step's factor has conditional mean <= 1).

* :class:`BettingEProcess`: a bettor against a bound on a mean, E[Y_t | past] <= m_t (or >= m_t);
  :class:`SplitBetting`: one per kind of trial, multiplied.
* :class:`NoiseEvidence`: where the target reports each answer's clean and noisy scores, the
  residuals ``noisy - clean`` of a correct report-noisy-max are i.i.d. draws of the claimed noise
  (``app.audit.conformance``, the fixed design's version). Sequentially: (a) against the claim, a
  mixture of likelihood ratios of the noise scaled down (x 1/2, 1/4, 1/10) over the claimed law,
  plus the events a continuous noise gives probability 0 (an exact zero residual, a release that
  is not the argmax of the reported scores); (b) against each alternative of
  ``app.audit.power.ALTERNATIVES``, the likelihood ratio of the claimed law over the alternative's
  (a simple null: a martingale under it), or, where the alternative puts no noise on a score that
  the observation shows noisy, an event of probability 0 under it. The same processes read esa's
  noisy - clean mean embedding, every coordinate one draw, and, through ``add_log_ratios``, the
  token mechanisms' released tokens under softmax(scores / f) (``app.audit.gen_noise``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from app.audit.noise import VotingNoise

_ONS = 2.0 / (2.0 - math.log(3.0))
_LOG_MAX = 700.0
B_MAX = 0.95
GRID = (0.0, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9)  # OnsGridMix's fixed fractions
ONS_SHARE = 0.8  # OnsGridMix's weight on ONS: gross violations as fast as ONS alone (bench: 0.5 cost ~10 prompts)
INF_LOG = _LOG_MAX  # the log e-value of an event of probability 0 under the null (e = e^700)
SCALE_DOWN = (0.5, 0.25, 0.1)  # the violation mixture's scaled-down noises
_LAWS = ("gaussian", "laplace", "gumbel")


def payoff(y: float, m: float, side: int) -> float:
    """A bet's payoff u = side (y - m) / r against the bound m, with r the most it can lose (m for
    ``side=+1``, 1 - m for -1; at least 1e-3), so u >= -1: every bettor here multiplies by 1 + b u."""
    return side * (y - m) / max(m if side > 0 else 1.0 - m, 1e-3)


class BettingEProcess:
    """Wealth of a bettor against H0: E[Y_t | past, m_t] <= m_t (``side=+1``) or >= m_t (``side=-1``),
    Y_t in [0, 1]. Payoff u = side (y - m) / r with r the most a bet can lose (m or 1 - m), so
    u >= -1 and the factor 1 + b u > 0 for a fraction b in [0, B_MAX], B_MAX < 1: under H0 the
    wealth is a nonnegative supermartingale (E[1 + b u] <= 1), P(sup wealth >= 1/alpha) <= alpha
    (Ville). The fraction follows the online Newton step (Cutkosky & Orabona 2018, as in
    Waudby-Smith & Ramdas 2023's betting confidence sequences): predictable, so the wealth stays a
    test supermartingale. B_MAX near 1 lets a gross violation (every bet won) grow it fastest."""

    __slots__ = ("side", "log_wealth", "b", "a")

    def __init__(self, side: int, b0: float = 0.0) -> None:
        if not 0.0 <= b0 <= B_MAX:
            raise ValueError(f"the first bet must lie in [0, {B_MAX}]")
        self.side, self.log_wealth, self.b, self.a = side, 0.0, float(b0), 1.0

    def update(self, y: float, m: float, side: int | None = None) -> None:
        """One observation y against the bound m; ``side`` (+1, -1, 0: no bet) overrides the
        process's own for this step (a predictable direction: the composite null then holds the
        direction trial by trial, as for ``sequential._Alternative``)."""
        side = self.side if side is None else side
        if side == 0:
            return
        u = payoff(y, m, side)
        self.log_wealth = min(_LOG_MAX, self.log_wealth + math.log1p(self.b * u))
        z = -u / (1.0 + self.b * u)  # d/db of -log(1 + b u): ONS step on the betting fraction
        self.a += z * z
        self.b = min(B_MAX, max(0.0, self.b - _ONS * z / self.a))

    @property
    def e(self) -> float:
        return math.exp(self.log_wealth)


class OnsGridMix:
    """The online Newton step bettor (weight ``ONS_SHARE``) beside an equal mixture of bettors at fixed
    fractions (``GRID``, 0 included): where the null holds strictly (a mean well inside it) the ONS
    fraction shrinks to 0 only as 1/t and its wealth can lose tens of nats (1000 trials of P = 0.287
    against a floor of 0.251: -52 nats), the mixture at most ln(len(GRID) / (1 - ONS_SHARE)); where it
    fails, the mixture grows at nearly the best fixed fraction's rate and ONS at the learned one's."""

    __slots__ = ("ons", "log_grid")

    def __init__(self, side: int, b0: float = 0.0) -> None:
        self.ons = BettingEProcess(side, b0)
        self.log_grid = [0.0] * len(GRID)

    def update(self, y: float, m: float, side: int | None = None) -> None:
        side = self.ons.side if side is None else side
        if side == 0:
            return
        self.ons.update(y, m, side)
        u = payoff(y, m, side)
        self.log_grid = [min(_LOG_MAX, lw + math.log1p(b * u)) for lw, b in zip(self.log_grid, GRID)]

    @property
    def log_wealth(self) -> float:
        top_grid = max(self.log_grid)
        grid = top_grid + math.log(sum(math.exp(x - top_grid) for x in self.log_grid) / len(GRID))
        top = max(self.ons.log_wealth, grid)
        return top + math.log(ONS_SHARE * math.exp(self.ons.log_wealth - top) + (1.0 - ONS_SHARE) * math.exp(grid - top))

    @property
    def e(self) -> float:
        return math.exp(self.log_wealth)


class SplitBetting:
    """The product of :class:`BettingEProcess` bettors against one null, one per kind of trial
    (``kind``: known before the trial, e.g. with or without the canary). Each learns its own fraction;
    they move on disjoint steps, so the product is a test supermartingale (each step's factor has
    conditional mean <= 1 under the null). Where the kinds differ (a winner-only noise bug releases the
    minority label below the release floor on the unanimous no-canary trials and above it with the
    canary), one shared fraction averages the two and sees nothing; split, the no-canary bettor grows
    and the other stays near fraction 0."""

    __slots__ = ("side", "b0", "by_kind")

    def __init__(self, side: int, b0: float = 0.0) -> None:
        self.side, self.b0 = side, b0
        self.by_kind: dict[object, OnsGridMix] = {}

    def update(self, y: float, m: float, kind: object) -> None:
        proc = self.by_kind.get(kind)
        if proc is None:
            proc = self.by_kind[kind] = OnsGridMix(self.side, self.b0)
        proc.update(y, m)

    @property
    def log_wealth(self) -> float:
        return min(_LOG_MAX, sum(p.log_wealth for p in self.by_kind.values()))

    @property
    def e(self) -> float:
        return math.exp(self.log_wealth)


class PlugInMix:
    """The average of two bettors against the same null as ``BettingEProcess``: the online Newton step
    one, and one that bets each trial the Kelly fraction for a plug-in mean p (the claimed law's, known
    before the trial: predictable). An average of test supermartingales is one; against a target that
    follows the claim it grows at nearly the Kelly rate from the first trial (ONS needs a warm-up), and
    loses at most ln 2 against the ONS bettor where the plug-in is wrong."""

    __slots__ = ("ons", "log_plug")

    def __init__(self, side: int) -> None:
        self.ons, self.log_plug = BettingEProcess(side), 0.0

    def update(self, y: float, m: float, p: float) -> None:
        side = self.ons.side
        self.ons.update(y, m)
        u1, u0 = payoff(1.0, m, side), payoff(0.0, m, side)  # payoffs of y = 1, y = 0
        b = 0.0
        if u1 * u0 < 0.0:  # Kelly for a two-point payoff: argmax p ln(1 + b u1) + (1 - p) ln(1 + b u0)
            b = min(B_MAX, max(0.0, -(p * u1 + (1.0 - p) * u0) / (u1 * u0)))
        u = payoff(y, m, side)
        self.log_plug = min(_LOG_MAX, self.log_plug + math.log1p(b * u))

    @property
    def e(self) -> float:
        return 0.5 * (self.ons.e + math.exp(self.log_plug))


def toward(claimed: float, m: float) -> int:
    """The direction (+1, -1; 0: none) of a bet against an alternative's mean m that points to the
    claim's mean: the null "m, or further from the claim" then holds trial by trial (no bet where the
    trial cannot tell them apart)."""
    return 0 if abs(claimed - m) <= 1e-12 else (1 if claimed > m else -1)


def dp_release_bound(out: float, epsilon: float, delta: float) -> float:
    """The largest P(event | in) that (epsilon, delta)-DP allows beside P(event | out) = out, both ways
    round: P(in) <= e^eps out + delta and 1 - out <= e^eps (1 - P(in)) + delta."""
    if epsilon > 50:
        return 1.0
    e = math.exp(epsilon)
    return min(1.0, e * out + delta, 1.0 - (1.0 - out - delta) / e)


def max_pair_accuracy(epsilon: float, delta: float) -> float:
    """(e^eps + delta) / (1 + e^eps): the most a fixed guess can be right on a balanced pair under
    (epsilon, delta)-DP (the symmetric point of TPR <= e^eps FPR + delta, 1 - FPR <= e^eps (1 - TPR) + delta)."""
    if epsilon > 50:
        return 1.0
    return min(1.0, (math.exp(epsilon) + delta) / (1.0 + math.exp(epsilon)))


def max_both_right(epsilon: float, delta: float) -> float:
    """The most P(released canary label | in) x P(other label | out) can be under (epsilon, delta)-DP:
    p0^2, p0 = ``max_pair_accuracy``. With p = TPR and a = 1 - FPR the DP constraints are
    p <= e^eps (1 - a) + delta and a <= e^eps (1 - p) + delta: a convex set symmetric in (p, a), and
    p a is quasi-concave, so its maximum is at a symmetric point, p = a = p0. On a pair (one trial
    in, one out, independent given the contexts) the indicator "both right" then has mean <= p0^2:
    a bettor on it gains ln(1/p0^2) per pair against a noise-free target, twice the pair accuracy's
    ln(1/p0) (and the most any test can: the point (p0, 1 - p0) is in the null)."""
    return max_pair_accuracy(epsilon, delta) ** 2


def fewest_pairs_to_refute(epsilon: float, delta: float, alpha: float, power: float = 1.0) -> int | None:
    """The fewest pairs after which ANY level-``alpha`` black-box test (fixed-size or sequential, on any
    statistic of the releases) can say "violation" with probability ``power`` against a target that
    releases the canary's outcome with the canary and the other without it on every trial; None when
    no number of pairs can (p0 = 1: the claim allows that release). The floor every black-box audit
    of the claim sits on, whatever its design or bettors.

    Why: randomized response between the two outcomes, right with probability p0 =
    ``max_pair_accuracy`` on each trial independently, satisfies (epsilon, delta)-DP, and gives the
    sequence the perfect target produces over k pairs probability p0^(2k). A test that rejects with
    probability phi on that sequence has level >= phi p0^(2k), so phi <= alpha / p0^(2k) (Neyman and
    Pearson: no other outcome can raise the power against a target that produces only this one):
    power needs p0^(2k) <= alpha / power, k >= ln(power / alpha) / ln(1 / p0^2). (White-box audits read
    the noise and assume its law, which this bound does not cover.)"""
    if not 0.0 < alpha < 1.0 or not 0.0 < power <= 1.0 or not epsilon >= 0.0 or not 0.0 <= delta <= 1.0:
        raise ValueError("epsilon >= 0, delta in [0, 1], alpha in (0, 1) and power in (0, 1] required")
    if power <= alpha:
        return 0
    # 1 - p0 = (1 - delta) / (1 + e^eps), written so that no exp overflows (it underflows to 0 past eps ~745)
    wrong = (1.0 - delta) * math.exp(-epsilon) / (1.0 + math.exp(-epsilon))
    if wrong <= 0.0:
        return None
    pairs = math.log(power / alpha) / (-2.0 * math.log1p(-wrong))
    # a lower bound: where rounding leaves an integer a hair above itself, keep the integer
    return max(1, math.ceil(pairs * (1.0 - 1e-12)))


def black_box_floor(claimed_epsilon: float, delta: float, confidence: float) -> tuple[dict[str, int] | None, str]:
    """What the planners report of ``fewest_pairs_to_refute`` at an audit's claim and confidence: the
    floor as pairs and trials (one trial with the canary and one without per pair; None: no finite
    count), and a note that says what it means."""
    pairs = fewest_pairs_to_refute(claimed_epsilon, delta, 1.0 - confidence)
    floor = None if pairs is None else {"pairs": pairs, "trials": 2 * pairs}
    return floor, ("a black-box violation needs at least " + (f"{2 * pairs} trials ({pairs} pairs)" if pairs is not None
                   else "more trials than any audit can run") + " at this claim and confidence, whatever the design "
                   "or the test, even against a target that reveals the canary on every trial (black_box_floor)")


_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _logpdf(kind: str, z: np.ndarray, scale: float) -> np.ndarray:
    """log density of ``scale`` x the claimed standard law at z (z in units of the claimed scale):
    N(0, 1), Laplace(0, 1), Gumbel(0, 1) (scipy's norm, laplace, gumbel_r; closed forms for speed,
    tested against scipy)."""
    x = z / scale
    if kind == "gaussian":
        out = -0.5 * x * x - _LOG_SQRT_2PI
    elif kind == "laplace":
        out = -np.abs(x) - math.log(2.0)
    elif kind == "gumbel":
        out = -(x + np.exp(-np.clip(x, -700.0, None)))
    else:
        raise ValueError(f"unknown noise {kind!r}")
    return out - math.log(scale)


class NoiseEvidence:
    """White-box e-processes over reported (clean, noisy) score vectors (see the module docstring).

    ``claimed``: the claim's noise; ``alternatives``: name -> the alternative's noise (its
    ``noise_multiplier`` and ``winner_only``; None: the observations say nothing about it, it is left to
    the black-box test: ``covers``). Each update is one answer. Log e-values are capped at 700 (an
    event of probability 0 under the null reaches the cap at once)."""

    def __init__(self, claimed: VotingNoise, alternatives: Mapping[str, VotingNoise | None]) -> None:
        if claimed.kind not in _LAWS:
            raise ValueError(f"unknown noise {claimed.kind!r}")
        self.kind, self.scale = claimed.kind, float(claimed.scale)
        self.alternatives = alternatives
        self.log_down = np.zeros(len(SCALE_DOWN))  # one likelihood ratio per scaled-down noise
        self.impossible: list[str] = []  # findings of probability 0 under the claim
        self.log_alt = {name: 0.0 for name, alt in alternatives.items() if alt is not None}

    def update(self, clean: Sequence[float] | np.ndarray, noisy: Sequence[float] | np.ndarray,
               released: int | None) -> None:
        """One answer's clean and noisy statistic (a score vector, or a mean embedding: every coordinate
        one draw of the noise); ``released``: the released label's index (None: no argmax check)."""
        c = np.asarray(clean, dtype=float)
        y = np.asarray(noisy, dtype=float)
        if c.shape != y.shape or c.ndim != 1 or c.size < 2:
            raise ValueError("clean and noisy scores must be 1-d of the same length >= 2")
        r = y - c
        zero = np.abs(r) <= 1e-12 * np.maximum(1.0, np.abs(c))
        if released is not None and released >= 0 and released != int(np.argmax(y)):
            self.flag("a released label is not the argmax of the reported noisy scores")
        if zero.any():
            self.flag("a score got no noise (a continuous noise is never exactly 0): noise missing on some "
                      "labels or coordinates (e.g. winner-only) or everywhere")
        z = r[~zero] / self.scale
        base = _logpdf(self.kind, z, 1.0)  # the claimed law's log density of each noisy score
        down = [float(np.sum(_logpdf(self.kind, z, m) - base)) for m in SCALE_DOWN]
        alts: dict[str, float] = {}
        for name, alt in self.alternatives.items():
            if alt is None:
                continue
            m = float(alt.noise_multiplier)
            if m == 0.0 or alt.winner_only:
                # the alternative noises no score (or only the winner's): more noisy scores than that have
                # probability 0 under it
                if z.size >= (2 if alt.winner_only else 1):
                    alts[name] = INF_LOG
            elif m != 1.0:
                alts[name] = float(np.sum(base - _logpdf(self.kind, z, m)))
        self.add_log_ratios(down, alts)

    def add_log_ratios(self, down: Sequence[float], alternatives: dict[str, float]) -> None:
        """One observation's log likelihood ratios, however computed (residual densities here, a released
        token's probabilities in ``app.audit.gen_noise``): ``down[i]`` = log p_{SCALE_DOWN[i]} - log p_claimed
        (against the claim), ``alternatives[name]`` = log p_claimed - log p_name (INF_LOG: probability 0
        under that alternative). Each factor has conditional mean 1 under its null, so the running
        products stay test martingales (González et al. Section 3)."""
        for i, lr in enumerate(down):
            self.log_down[i] = min(INF_LOG, self.log_down[i] + float(lr))
        for name, lr in alternatives.items():
            if name in self.log_alt:
                self.log_alt[name] = min(INF_LOG, self.log_alt[name] + float(lr))

    def flag(self, finding: str) -> None:
        """Record an observation of probability 0 under the claim (the violation e-value jumps to the
        cap): the caller's own consistency checks (e.g. a generation release that is not the one the
        reported noisy statistic selects)."""
        if finding not in self.impossible:
            self.impossible.append(finding)

    @property
    def e_violation(self) -> float:
        """Against the claim: e^700 after an event of probability 0 under it, else the mean of the
        scaled-down likelihood ratios."""
        if self.impossible:
            return math.exp(INF_LOG)
        return float(np.mean(np.exp(self.log_down)))

    @property
    def e(self) -> float:
        return self.e_violation

    def covers(self, name: str) -> bool:
        """Whether the white-box evidence tests alternative ``name`` (else its e-value is the black-box one)."""
        return name in self.log_alt

    def e_alternative(self, name: str) -> float:
        return math.exp(self.log_alt[name])


def bernoulli_kl(p: float, q: float) -> float:
    """Bernoulli KL(p || q) in nats (clipped away from 0 and 1): the growth rate of a bet on q when p holds."""
    p, q = min(max(p, 1e-12), 1 - 1e-12), min(max(q, 1e-12), 1 - 1e-12)
    return p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))


__all__ = ["B_MAX", "BettingEProcess", "NoiseEvidence", "SCALE_DOWN", "bernoulli_kl", "max_both_right",
           "max_pair_accuracy", "toward"]

