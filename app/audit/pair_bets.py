"""The black-box violation bets of a paired generation audit (``app.audit.gen_sequential``).

Each pair is one release with the canary (C1) and one without (C0), independent given the contexts;
r_in, r_out in {0, 1} say whether each released y1. Under (epsilon, delta)-DP every event E of the
release obeys P(E | in) <= e^eps P(E | out) + delta and the same with in and out swapped
(Dwork & Roth 2014, Def. 2.4; tight-auditing Section 2 writes it on C1 / C0, and its empirical loss
eps_emp = log(TPR / FPR) is this inequality read off counts; its Lemma 3.1 shows that loss peaking where
TPR and FPR are small, the rare release below). With two events,
y1 and y0 = not y1, that is four inequalities, each a bound on the mean of a pair statistic in [0, 1]:

    y1, in over out   Y = (r_in e^-eps + 1 - r_out) / (e^-eps + 1)      ("ratio_y1_in")
    y0, out over in   Y = ((1 - r_out) e^-eps + r_in) / (e^-eps + 1)    ("ratio_y0_out")
    y1, out over in   Y = (r_out e^-eps + 1 - r_in) / (e^-eps + 1)      ("ratio_y1_out")
    y0, in over out   Y = ((1 - r_in) e^-eps + r_out) / (e^-eps + 1)    ("ratio_y0_in")

each with E[Y] <= p0 = (e^eps + delta) / (1 + e^eps) (multiply out: E[Y] (1 + e^eps) = P(E | a) +
e^eps (1 - P(E | b)) <= e^eps P(E | b) + delta + e^eps - e^eps P(E | b)). The pair accuracy of the
guess "y1 released: canary in" is the average of the first two, its mirror's the average of the last
two (``eprocess.max_pair_accuracy``: the symmetric point). The averages are the strongest tests where
both inequalities are near their limits; a release that is *rare* on both contexts (esa on 4
partitions at a tenth of its noise, claim 2: y1 with probability 0.082 with the canary and 0.0026
without) exceeds one inequality (0.082 > e^2 x 0.0026) while the other has slack of ~6, so the
average never leaves its null: only the single-inequality bet sees it. Against that release the
bet on "ratio_y1_in" grows at 0.0043 nats per pair, the KL divergence of the release from the
nearest (epsilon, delta)-DP pair law (computed numerically: no test does better on these bits), so
~700 pairs at weight 1 (claim 2); at claim 1 (0.228 / 0.068) 0.00135, ~2200 pairs.

"Both right" r_in (1 - r_out) has mean <= p0^2 (``eprocess.max_both_right``), the strongest test
against a release the canary decides (ln(1/p0^2) per pair, the most any test can gain).

The violation e-value is a fixed-weight average of all eight bettors (``WEIGHTS``; a fixed-weight
average of test supermartingales on one filtration is one, so Ville's inequality bounds the chance
that it ever crosses 1/alpha by alpha): the guess "y1: canary in" weighs 0.8 (its two pair
statistics 0.25 each, its two inequalities 0.2 and 0.1), its mirror 0.2 (a release that separates the
contexts the other way round is as much a violation: esa's greedy full_context on SmolLM2 does that).
Where the auditor has a design model of the target (``gen_power``), ``design_weights`` moves half of
the weight onto one bettor: the one that brings the slowest of the required alternatives that violate
the claim to 1/alpha soonest, by each bettor's best constant-fraction growth per pair against that
alternative's release (``growth_rates``) and the ln(1/(alpha w)) nats its weight w leaves it to climb.
esa on 4 partitions at a tenth of its noise exceeds one inequality only, "ratio_y1_in" (~0.003-0.005
nats per pair: ~800 pairs at claim 1), which then weighs 0.6; the one-token designs' gross alternatives
win nearly every pair, where "both right" grows fastest (ln(1/p0^2) per pair at most: the black-box
floor, ``eprocess.fewest_pairs_to_refute``), which then weighs 0.625 (7.3 -> 5.8 pairs to 1/alpha at claim 1,
18 -> 14 at claim 2). The weights depend on the design, the claim and alpha only, fixed before the
first trial, so the average stays a test supermartingale for ANY target; what the design model buys
is speed, never validity.
The single-inequality bettors start at fraction 0 (their best fraction is anywhere in [0, 1]: 0.16
and 0.75 of the most for the two esa cases above) and learn it (``eprocess.OnsGridMix``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from app.audit.eprocess import B_MAX, BettingEProcess, OnsGridMix, payoff
from app.audit.sequential import FIRST_BET

# name -> weight in the violation mixture (sum 1)
WEIGHTS = {"accuracy": 0.25, "both_right": 0.25, "ratio_y1_in": 0.2, "ratio_y0_out": 0.1,
           "accuracy_mirrored": 0.075, "both_right_mirrored": 0.075, "ratio_y1_out": 0.025, "ratio_y0_in": 0.025}
# The refuted-model futility stop (gen_sequential) waits while the observed shares lie within this many
# standard errors of exceeding an inequality: at 1 it stopped 12 of 50 audits of esa at a tenth of its
# noise (claim 1, true margin +0.043) after 84-422 trials that the bet would have decided; at 3 a release
# well inside the claim still stops early (y1 0.75 / 0.75: ~10 and ~3.4 standard errors inside at 100 pairs).
FUTILITY_Z = 3.0
RATIOS = {"ratio_y1_in": ("y1", "with", "without"), "ratio_y0_out": ("y0", "without", "with"),
          "ratio_y1_out": ("y1", "without", "with"), "ratio_y0_in": ("y0", "with", "without")}


def ratio_statistics(r_in: float, r_out: float, epsilon: float) -> dict[str, float]:
    """The four single-inequality pair statistics (module docstring), each with mean <= p0 under DP."""
    k = math.exp(-epsilon) if epsilon < 700 else 0.0
    n = 1.0 + k
    return {"ratio_y1_in": (r_in * k + 1.0 - r_out) / n, "ratio_y0_out": ((1.0 - r_out) * k + r_in) / n,
            "ratio_y1_out": (r_out * k + 1.0 - r_in) / n, "ratio_y0_in": ((1.0 - r_in) * k + r_out) / n}


def _statistics(r_in: float, r_out: float, epsilon: float) -> dict[str, float]:
    """Every bettor's pair statistic for one pair's releases (1.0: y1): what ``PairBets.update`` bets on
    (against p0, "both right" against p0^2) and ``growth_rates`` prices."""
    x = 0.5 * (r_in + 1.0 - r_out)
    return {"accuracy": x, "both_right": r_in * (1.0 - r_out), "accuracy_mirrored": 1.0 - x,
            "both_right_mirrored": (1.0 - r_in) * r_out, **ratio_statistics(r_in, r_out, epsilon)}


_FRACTIONS = np.linspace(0.0, B_MAX, 96)


def growth_rates(p_in: float, p_out: float, epsilon: float, p0: float, c2: float) -> dict[str, float]:
    """Each bettor's best log growth per pair at a constant fraction in [0, B_MAX] (its payoff as
    ``eprocess.payoff``) against independent releases of y1 with probability ``p_in`` with the canary and
    ``p_out`` without; 0 where no fraction gains (the release keeps that bettor's null)."""
    outcomes = [(a, b) for a in (1.0, 0.0) for b in (1.0, 0.0)]
    prob = np.array([(p_in if a else 1.0 - p_in) * (p_out if b else 1.0 - p_out) for a, b in outcomes])
    stats = [_statistics(a, b, epsilon) for a, b in outcomes]
    out = {}
    for name in WEIGHTS:
        m = c2 if name.startswith("both_right") else p0
        u = np.array([payoff(st[name], m, +1) for st in stats])
        logs = np.log1p(np.outer(_FRACTIONS, u))  # u >= -1 and fractions <= B_MAX < 1: finite
        out[name] = max(0.0, float(np.max(logs @ prob)))
    return out


def design_weights(laws: list[tuple[float, float]], epsilon: float, p0: float, c2: float,
                   alpha: float = 0.05) -> dict[str, float]:
    """``WEIGHTS``, with half of it moved onto the one bettor that minimises the pairs the slowest
    violating law of ``laws`` (P(y1 | in), P(y1 | out) of each required alternative under the design
    model) needs to reach 1/alpha, min over bettors of ln(1 / (alpha w)) / growth (module docstring);
    ``WEIGHTS`` where no law violates the claim or no move shortens that."""
    rates = [g for g in (growth_rates(p_in, p_out, epsilon, p0, c2) for p_in, p_out in laws)
             if max(g.values()) > 1e-9]
    if not rates:
        return dict(WEIGHTS)

    def slowest(w: dict[str, float]) -> float:
        return max(min((math.log(1.0 / (alpha * w[n])) / g[n] for n in w if g[n] > 1e-9 and w[n] > 0),
                       default=math.inf) for g in rates)

    best, best_pairs = dict(WEIGHTS), slowest(WEIGHTS)
    for name in WEIGHTS:  # in WEIGHTS' order: a tie keeps the earlier bettor
        w = {n: 0.5 * v + (0.5 if n == name else 0.0) for n, v in WEIGHTS.items()}
        pairs = slowest(w)
        if pairs < best_pairs * (1.0 - 1e-9):
            best, best_pairs = w, pairs
    return best


class PairBets:
    """The black-box violation bets of one design arm (module docstring), with the counts they saw.
    ``weights``: ``WEIGHTS`` or ``design_weights`` (summing to 1)."""

    def __init__(self, epsilon: float, p0: float, c2: float, weights: dict[str, float] | None = None) -> None:
        self.epsilon, self.p0, self.c2 = epsilon, p0, c2
        self.weights = dict(WEIGHTS if weights is None else weights)
        if set(self.weights) != set(WEIGHTS) or abs(sum(self.weights.values()) - 1.0) > 1e-9 or min(
                self.weights.values()) < 0.0:
            raise ValueError("the violation bets' weights cover every bettor, are >= 0 and sum to 1")
        self.procs: dict[str, Any] = {n: BettingEProcess(+1, FIRST_BET) for n in
                                      ("accuracy", "both_right", "accuracy_mirrored", "both_right_mirrored")}
        self.procs.update({n: OnsGridMix(+1) for n in RATIOS})
        self.pairs = 0
        self.both_right = 0.0
        self.correct = 0.0  # the running sum of the pair accuracy
        self.seen = {True: 0, False: 0}  # releases of y1 with / without the canary

    def update(self, rel: dict[bool, float]) -> None:
        """One pair's releases (1.0: y1), with and without the canary."""
        r_in, r_out = rel[True], rel[False]
        stats = _statistics(r_in, r_out, self.epsilon)
        for name, y in stats.items():
            self.procs[name].update(y, self.c2 if name.startswith("both_right") else self.p0)
        self.pairs += 1
        self.both_right += stats["both_right"]
        self.correct += stats["accuracy"]
        self.seen[True] += int(r_in)
        self.seen[False] += int(r_out)

    def draw_pair(self, target: Any, c1: Any, c0: Any, attack: Any, y1: str, rng: np.random.Generator) -> None:
        rel: dict[bool, float] = {}
        for member in ((True, False) if rng.random() < 0.5 else (False, True)):
            rel[member] = float(target.observe(c1 if member else c0, attack, rng).label == y1)
        self.update(rel)

    def components(self) -> dict[str, float]:
        return {n: p.e for n, p in self.procs.items()}

    @property
    def e(self) -> float:
        return sum(self.weights[n] * p.e for n, p in self.procs.items())

    def strongest(self) -> str:
        """The bettor that carries most of the mixture now."""
        return max(self.procs, key=lambda n: self.weights[n] * self.procs[n].e)

    def _shares(self) -> dict[tuple[str, str], float]:
        """Observed share of each event (y1, y0) with and without the canary."""
        n = max(1, self.pairs)
        w, wo = self.seen[True] / n, self.seen[False] / n
        return {("y1", "with"): w, ("y1", "without"): wo, ("y0", "with"): 1.0 - w, ("y0", "without"): 1.0 - wo}

    def _ratio_words(self, name: str, shares: dict[tuple[str, str], float], delta: float) -> str:
        event, a, b = RATIOS[name]
        pa, pb = shares[(event, a)], shares[(event, b)]
        return (f"{event} was released in {pa:.3g} of {self.pairs} answers {a} the canary and {pb:.3g} {b} it, "
                f"where (epsilon, delta)-DP allows at most e^eps x {pb:.3g} + delta = "
                f"{min(1.0, math.exp(min(self.epsilon, 700.0)) * pb + delta):.3g}")

    def may_exceed_ratio(self, delta: float, z: float = FUTILITY_Z) -> bool:
        """Whether the observed shares exceed one of the four inequalities, or fall short of it by less
        than ``z`` standard errors (a violation may come): the futility rule's test, not evidence (an
        optional stop keeps every level)."""
        if not self.pairs:
            return True
        share, k = self._shares(), math.exp(min(self.epsilon, 700.0))
        for event, a, b in RATIOS.values():
            pa, pb = share[(event, a)], share[(event, b)]
            se = math.sqrt((pa * (1.0 - pa) + k * k * pb * (1.0 - pb)) / self.pairs)
            if pa - k * pb - delta > -z * se:
                return True
        return False

    def exceeded(self, delta: float) -> str | None:
        """The first inequality the observed shares exceed, in words (point estimates, not evidence: the
        note an inconclusive audit carries, that a larger cap may decide), or None."""
        if not self.pairs:
            return None
        share, k = self._shares(), math.exp(min(self.epsilon, 700.0))
        for name, (event, a, b) in RATIOS.items():
            if share[(event, a)] > k * share[(event, b)] + delta:
                return self._ratio_words(name, share, delta)
        return None

    def why(self, delta: float) -> str:
        """The verdict's reason, from the bettor that carries the mixture."""
        n, pairs = self.strongest(), max(1, self.pairs)
        if n in RATIOS:
            return self._ratio_words(n, self._shares(), delta)
        if n.startswith("both_right"):
            return (f"'both right' rate {self.both_right / pairs:.3g} of the guess 'y1 released: canary in' "
                    f"against the claim's most {self.c2:.3g}" if n == "both_right" else
                    f"the guess 'y0 released: canary in' was right on both answers of a pair more often than the "
                    f"claim's most {self.c2:.3g} (the release separates the contexts the other way round)")
        if n == "accuracy_mirrored":
            return (f"pair accuracy of the guess 'y0 released: canary in' {1.0 - self.correct / pairs:.3g} against the "
                    f"claim's most {self.p0:.3g} (the release separates the contexts the other way round)")
        return f"pair accuracy of the guess 'y1 released' {self.correct / pairs:.3g} against the claim's most {self.p0:.3g}"


__all__ = ["PairBets", "RATIOS", "WEIGHTS", "design_weights", "growth_rates", "ratio_statistics"]
