"""Sequential (anytime-valid) canary audits: stop as soon as the evidence decides.

The fixed design (``app.audit.campaign``, ``app.audit.planner``) fixes its trials in
advance so that the Clopper-Pearson bound holds. Here trials are drawn in batches
of pairs (one trial with the canary, one without, on the fixed contexts C1/C0 of
tight-auditing Section 3.2) and evidence is accumulated as e-processes -- products of
bets that are test supermartingales under their null -- following González,
Dulce-Rubio, Ramdas & Ribero, "Sequentially Auditing Differential Privacy"
(NeurIPS 2025): under the null an e-process crosses 1/alpha with probability at most
alpha at ANY stopping time (Ville's inequality), so the audit may look after every
batch and stop when it likes.

* Violation of the claim (epsilon, delta): each pair yields the accuracy
  X = (1[released == canary label | canary in] + 1[released != canary label | out]) / 2
  of the fixed guess "the canary label was released". Under (epsilon, delta)-DP,
  TPR <= e^eps FPR + delta and 1 - FPR <= e^eps (1 - TPR) + delta, so
  E[X] <= p0 = (e^eps + delta) / (1 + e^eps) for ANY model and vote split (the
  symmetric point of the two constraints; the González et al. black-box test
  of membership accuracy). For two-label rnm queries the release floor
  (``app.audit.conformance.min_release_probability``) adds: every label's release
  frequency is >= floor under the claim, whatever the votes. The violation
  e-process is a fixed-weight average of these test supermartingales (an average
  of e-processes on one filtration is one), rejected at 1/alpha.
* Pass: every required alternative (``app.audit.power.ALTERNATIVES``) is rejected.
  Under alternative a the release probability of each trial is known given its
  clean votes: the votes the target reports (mechanism and simulated targets,
  white-box gateways), else the one-vote design model of tight-auditing Lemma 3.1
  (the fixed design's assumption, stated in the verdict). A two-sided betting
  e-process on 1[released == canary label] - mu_a rejects a at 1/alpha; where the
  tie-break of a clean argmax matters (no noise, winner-only) both tie-breaks must
  be rejected (the minimum of their e-values).
* Cap: neither by the cap: inconclusive, with the e-values reached.

Bets: online Newton step on the betting fraction (Cutkosky & Orabona 2018, as in the
betting confidence sequences of Waudby-Smith & Ramdas 2023), clipped to [0, 0.9] of
the largest bet that cannot ruin the bettor (B_MAX): a predictable strategy, so each
wealth process is a test supermartingale under its null.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from app.audit.insertion import exemplar_tuple, paired_contexts
from app.audit.noise import VotingNoise
from app.audit.power import ALTERNATIVES, TIES, alternative_noise, claimed_noise, design_votes, release_probability

Progress = Callable[[float, str], None]
DEFAULT_BATCH_PAIRS = 4
DEFAULT_CAP = 10_000  # trials, for trials "auto"
_ONS = 2.0 / (2.0 - math.log(3.0))
_LOG_MAX = 700.0
B_MAX = 0.9


class BettingEProcess:
    """Wealth of a bettor against H0: E[Y_t | past, m_t] <= m_t (``side=+1``) or >= m_t (``side=-1``),
    Y_t in [0, 1]. Payoff u = side (y - m) / r with r the most a bet can lose (m or 1 - m), so
    u >= -1 and the factor 1 + b u > 0 for a fraction b in [0, B_MAX], B_MAX < 1: under H0 the
    wealth is a nonnegative supermartingale (E[1 + b u] <= 1), P(sup wealth >= 1/alpha) <= alpha
    (Ville). B_MAX near 1 lets a gross violation (every bet won) grow the wealth fastest."""

    __slots__ = ("side", "log_wealth", "b", "a")

    def __init__(self, side: int) -> None:
        self.side, self.log_wealth, self.b, self.a = side, 0.0, 0.0, 1.0

    def update(self, y: float, m: float) -> None:
        r = max(m if self.side > 0 else 1.0 - m, 1e-3)
        u = self.side * (y - m) / r
        self.log_wealth = min(_LOG_MAX, self.log_wealth + math.log1p(self.b * u))
        z = -u / (1.0 + self.b * u)  # d/db of -log(1 + b u): ONS step on the betting fraction
        self.a += z * z
        self.b = min(B_MAX, max(0.0, self.b - _ONS * z / self.a))

    @property
    def e(self) -> float:
        return math.exp(self.log_wealth)


def _mix(processes: Sequence[tuple[float, BettingEProcess]]) -> float:
    return float(sum(w * p.e for w, p in processes))


@dataclass
class SequentialResult:
    verdict: str  # violation | pass | inconclusive
    reason: str
    trials: int  # trials drawn (model calls to the target's classify path)
    pairs: int
    alpha: float
    e_violation: float
    e_components: dict[str, float]
    e_alternatives: dict[str, float]  # per required alternative: min over tie-breaks of its two-sided e-value
    vote_model: str  # observed | assumed
    cap: int
    p0: float  # the claim's largest pair accuracy
    accuracy: float  # observed mean pair accuracy
    seconds: float
    history: list[dict[str, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def max_pair_accuracy(epsilon: float, delta: float) -> float:
    """(e^eps + delta) / (1 + e^eps): the most a fixed guess can be right on a balanced pair under
    (epsilon, delta)-DP (the symmetric point of TPR <= e^eps FPR + delta, 1 - FPR <= e^eps (1 - TPR) + delta)."""
    if epsilon > 50:
        return 1.0
    return min(1.0, (math.exp(epsilon) + delta) / (1.0 + math.exp(epsilon)))


class _Alternative:
    """Two-sided e-processes for H_a: P(release positive | votes, a) = mu, one per tie-break that matters."""

    def __init__(self, name: str, noise: VotingNoise, positive: int, draws: int) -> None:
        self.name = name
        self.noise = alternative_noise(noise, name)
        self.ties = TIES if (self.noise.applied_scale == 0.0 or self.noise.winner_only) else TIES[:1]
        self.positive, self.draws = positive, draws
        self.procs = {t: (BettingEProcess(+1), BettingEProcess(-1)) for t in self.ties}
        self._mu: dict[tuple[str, tuple[float, ...]], float] = {}

    def mu(self, votes: np.ndarray, tie: str) -> float:
        key = (tie, tuple(float(x) for x in votes))
        if key not in self._mu:
            self._mu[key] = float(release_probability(self.noise, votes, self.positive, ties=tie,
                                                      draws=self.draws)[0])
        return self._mu[key]

    def update(self, released_positive: float, votes: np.ndarray) -> None:
        for t, (up, down) in self.procs.items():
            m = self.mu(votes, t)
            up.update(released_positive, m)
            down.update(released_positive, m)

    @property
    def e(self) -> float:
        return min(0.5 * (up.e + down.e) for up, down in self.procs.values())


def run_sequential(target: Any, exemplars: Sequence[tuple[str, str]], attack: Any, *, claimed_epsilon: float,
                   delta: float, noise: VotingNoise | None, partitions: int | None, alternatives: Sequence[str],
                   alpha: float, cap: int, rng: np.random.Generator, batch_pairs: int = DEFAULT_BATCH_PAIRS,
                   release_floor: bool = True, draws: int = 200_000, progress: Progress | None = None,
                   ) -> SequentialResult:
    """Draw pairs in batches of ``batch_pairs`` until the violation e-process or every required
    alternative's crosses 1/alpha, or ``cap`` trials. ``noise``: the claimed noise (None: no
    alternative can be modelled, so the audit can end violation or inconclusive only);
    ``partitions``: T for the design vote model where the target reports no clean votes;
    ``release_floor``: add the two-label floor test (rnm without a judge after the noise)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError("alpha must lie in (0, 1)")
    if cap < 2 or batch_pairs < 1:
        raise ValueError("the cap needs >= 2 trials and a batch >= 1 pair")
    t0 = time.perf_counter()
    report = progress or (lambda _f, _m: None)
    ex = [exemplar_tuple(e) for e in exemplars]
    c1, c0 = paired_contexts(ex, attack.canary.exemplar(), int(rng.integers(len(ex))))
    pos, k = attack.positive_index, len(attack.labels)
    p0 = max_pair_accuracy(claimed_epsilon, delta)
    acc = BettingEProcess(+1)
    components: list[tuple[str, float, BettingEProcess]] = [("accuracy", 1.0, acc)]
    floor = None
    if release_floor and noise is not None and k == 2 and partitions:
        from app.audit.conformance import min_release_probability

        floor = min_release_probability(claimed_noise(noise), partitions)
        components = [("accuracy", 1 / 3, acc)] + [(f"release_floor_{lab}", 1 / 3, BettingEProcess(-1))
                                                   for lab in attack.labels]
    alts = [] if noise is None else [_Alternative(a, claimed_noise(noise), pos, draws) for a in alternatives]
    notes: list[str] = []
    if noise is None and alternatives:
        notes.append("no noise model for this target: no alternative can be rejected, so no pass")
    design = None
    if partitions and noise is not None:
        neg = attack.negative_index if attack.negative_index is not None else (1 if pos == 0 else 0)
        design = design_votes(k, partitions, pos, neg)
    observed_any, assumed_any = False, False
    trials = pairs = 0
    correct = 0.0
    history: list[dict[str, float]] = []
    threshold = 1.0 / alpha
    verdict, reason = "inconclusive", ""

    def e_viol() -> float:
        return _mix([(w, p) for _, w, p in components])

    while trials + 2 <= cap:
        for _ in range(min(batch_pairs, (cap - trials) // 2)):
            rel: dict[bool, int] = {}
            for member in ((True, False) if rng.random() < 0.5 else (False, True)):
                obs = target.observe(c1 if member else c0, attack, rng)
                r = attack.labels.index(obs.label) if obs.label in attack.labels else -1
                rel[member] = r
                votes = getattr(obs, "clean_votes", None)
                if votes is not None:
                    observed_any = True
                    v = np.asarray(votes, dtype=float)
                elif design is not None:
                    assumed_any = True
                    v = design[0] if member else design[1]
                else:
                    v = None
                if v is not None:
                    for a in alts:
                        a.update(float(r == pos), v)
            trials += 2
            pairs += 1
            x = 0.5 * (float(rel[True] == pos) + float(rel[False] != pos))
            correct += x
            acc.update(x, p0)
            if floor is not None:  # the floor holds for every trial, with or without the canary: bet on each
                for i, (_, _, proc) in enumerate(components[1:]):
                    proc.update(float(rel[True] == i), floor)
                    proc.update(float(rel[False] == i), floor)
        ev = e_viol()
        ea = {a.name: a.e for a in alts}
        history.append({"trials": trials, "e_violation": ev, **{f"e_{n}": v for n, v in ea.items()}})
        report(min(0.99, trials / cap), f"sequential: {trials} trials, e-value {ev:.3g} (violation at "
               f"{threshold:g})")
        if ev >= threshold:
            top = max(components, key=lambda c: c[1] * c[2].e)[0]
            verdict = "violation"
            reason = (f"the e-value against the claim epsilon {claimed_epsilon:g} reached {ev:.4g} >= 1/alpha = "
                      f"{threshold:g} after {trials} trials (anytime-valid at level {alpha:g}; mostly {top})")
            break
        if alts and all(v >= threshold for v in ea.values()) and len(ea) == len(alternatives):
            verdict = "pass"
            reason = (f"no violation (e-value {ev:.3g} < {threshold:g}) and every required alternative rejected "
                      f"at level {alpha:g} after {trials} trials: " + ", ".join(f"{n} e={v:.3g}" for n, v in ea.items()))
            break
    vote_model = "observed" if observed_any and not assumed_any else "assumed"
    if verdict == "inconclusive":
        ev = e_viol()
        ea = {a.name: a.e for a in alts}
        open_ = [n for n in alternatives if ea.get(n, 0.0) < threshold]
        reason = (f"cap of {cap} trials reached: e-value against the claim {ev:.3g} < {threshold:g}, and "
                  + (", ".join(f"{n} e={ea.get(n, 0.0):.3g}" for n in open_) or "no alternative")
                  + " not rejected: not a pass")
    if vote_model == "assumed" and alts:
        notes.append("the alternatives' release probabilities use the one-vote design model (tight-auditing Lemma "
                     "3.1; the target reports no clean votes): a pass says the target is not the alternative as "
                     "that model predicts it")
    report(1.0, "sequential audit done")
    return SequentialResult(verdict, reason, trials, pairs, alpha, e_viol(),
                            {name: p.e for name, _, p in components}, {a.name: a.e for a in alts}, vote_model,
                            cap, p0, correct / max(1, pairs), time.perf_counter() - t0, history[-200:], notes)


def summarize(results: Sequence[SequentialResult]) -> Mapping[str, float]:
    """Verdict rates and mean trials over repeated audits (benchmarks, simulations)."""
    n = max(1, len(results))
    return {"violation": sum(r.verdict == "violation" for r in results) / n,
            "pass": sum(r.verdict == "pass" for r in results) / n,
            "inconclusive": sum(r.verdict == "inconclusive" for r in results) / n,
            "mean_trials": float(np.mean([r.trials for r in results])) if results else 0.0}


__all__ = ["ALTERNATIVES", "BettingEProcess", "SequentialResult", "max_pair_accuracy", "run_sequential", "summarize"]
