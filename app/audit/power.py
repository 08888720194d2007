"""The power of a canary audit: could it have seen a violation of the claim?

A rigorous lower bound (Clopper-Pearson, Jagielski et al. 2020) below the claim
means "no violation seen", which is evidence only if the audit could have seen
one. Three numbers say whether it could, all computed on the auditor's side:

* ``ceiling_epsilon``: the bound a perfect attack (TP = n1, FP = 0) reaches with
  these counted trials at this confidence. A claim at or above it can never be
  refuted by this many trials, whatever the target does.
* the design check: under the vote model (the canary moves one partition's vote,
  tight-auditing Lemma 3.1, or the clean votes actually observed), does the
  released label's distribution differ with and without the canary, under the
  claim and without any noise? With T >= 3 partitions and one canary a
  noise-free argmax never changes: a gateway that adds no noise gives bound 0.
* ``detection``: for named alternatives (noise x 1/2, x 1/4, no noise, noise on
  the winner only), the exact probability that the bound exceeds the claim,
  summing over the binomial laws of TP and FP (no simulation of trials).

The release probabilities of each alternative under a vote vector are exact for
two labels with Gaussian, Laplace or Gumbel noise's differences where closed
forms are simple (Gaussian) and Monte Carlo with a fixed seed otherwise
(``draws`` per distinct vote vector; standard error <= 0.5/sqrt(draws)).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import stats

from app.audit.estimates import bound_curves
from app.audit.noise import VotingNoise

# Named alternatives: how a broken implementation differs from the claimed noise.
ALTERNATIVES: dict[str, dict[str, Any]] = {
    "claimed": {"noise_multiplier": 1.0, "winner_only": False},
    "noise_half": {"noise_multiplier": 0.5, "winner_only": False},
    "noise_quarter": {"noise_multiplier": 0.25, "winner_only": False},
    "winner_only": {"noise_multiplier": 1.0, "winner_only": True},
    "no_noise": {"noise_multiplier": 0.0, "winner_only": False},
}
DEFAULT_REQUIRED = ("noise_quarter", "no_noise")
DEFAULT_MIN_DETECTION = 0.9
_REL_TOL = 1e-9


def claimed_noise(noise: VotingNoise) -> VotingNoise:
    """The noise the claim promises (any bug stripped)."""
    return replace(noise, noise_multiplier=1.0, winner_only=False)


def alternative_noise(noise: VotingNoise, name: str) -> VotingNoise:
    if name not in ALTERNATIVES:
        raise ValueError(f"unknown alternative {name!r}; use one of {', '.join(ALTERNATIVES)}")
    return replace(claimed_noise(noise), **ALTERNATIVES[name])


def design_votes(labels: int, partitions: int, positive: int, negative: int | None,
                 moved: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The best case for the auditor (tight-auditing Lemma 3.1, one vote moves): with the canary its
    partition votes ``positive`` and the other T - 1 vote ``negative``; without, all T vote ``negative``.
    ``moved`` > 1: a canary (or query) that moves that many partitions' votes."""
    if labels < 2 or partitions < 1 or not 1 <= moved <= partitions:
        raise ValueError("a design needs >= 2 labels, >= 1 partition and 1 <= moved <= partitions")
    neg = negative if negative is not None else (1 if positive == 0 else 0)
    vw, vo = np.zeros(labels), np.zeros(labels)
    vw[positive], vw[neg] = float(moved), float(partitions - moved)
    vo[neg] = float(partitions)
    return vw, vo


TIES = ("positive", "other")  # who wins a clean tie with the positive label


def _canonical(v: np.ndarray, positive: int, ties: str) -> tuple[np.ndarray, int]:
    """Rows with the positive label first (``ties="positive"``: it wins every tie under np.argmax) or
    last (``"other"``: it loses them), the other labels sorted in descending order. The noise is
    i.i.d. across labels, so the other labels are exchangeable: the release probability of the
    positive label depends only on this canonical row, never on where the query put its labels, and
    the Monte Carlo draws (fixed seed) are the same for the planner and for the verdict."""
    others = np.delete(v, positive, axis=1)
    others = -np.sort(-others, axis=1)
    if ties == "positive":
        return np.concatenate([v[:, [positive]], others], axis=1), 0
    if ties == "other":
        return np.concatenate([others, v[:, [positive]]], axis=1), v.shape[1] - 1
    raise ValueError(f"ties must be one of {TIES}")


def release_probability(noise: VotingNoise, votes: np.ndarray, positive: int, *, draws: int = 20_000,
                        seed: int = 0, ties: str = "positive") -> np.ndarray:
    """P(argmax(noisy votes) == positive) for each row of ``votes`` (m, K) under ``noise``.

    A clean tie with the positive label (no noise; the winner of a winner-only bug) goes to it
    (``ties="positive"``) or against it (``"other"``): an implementation's tie-break is its own, so
    the power model takes the worse of the two (``power_report``). Two labels with Gaussian noise:
    Phi((v_p - v_o) / (s sqrt 2)) (the difference of two independent N(0, s^2)). Otherwise Monte
    Carlo over distinct canonical rows with a fixed seed (standard error <= 0.5/sqrt(draws))."""
    v = np.atleast_2d(np.asarray(votes, dtype=float))
    c, pos = _canonical(v, positive, ties)
    s = noise.applied_scale
    if s == 0.0:
        return (np.argmax(c, axis=1) == pos).astype(float)
    if v.shape[1] == 2 and noise.kind == "gaussian" and not noise.winner_only:
        other = 1 - positive
        return stats.norm.cdf((v[:, positive] - v[:, other]) / (s * math.sqrt(2.0)))
    uniq, inv = np.unique(c, axis=0, return_inverse=True)
    out = np.array([_mc_release(noise, tuple(float(x) for x in row), pos, draws, seed) for row in uniq])
    return out[np.asarray(inv).reshape(-1)]


@lru_cache(maxsize=4096)
def _mc_release(noise: VotingNoise, row: tuple[float, ...], pos: int, draws: int, seed: int) -> float:
    """Monte Carlo P(argmax(row + noise) == pos), its stream seeded by (seed, the row's bytes): a row's
    estimate does not depend on which other rows were asked with it, so it is computed once per process
    (the planner asks the same canonical rows for every design it weighs; the verdict gets the same
    number as the plan)."""
    v = np.asarray(row, dtype=float)
    digest = hashlib.blake2b(v.tobytes() + pos.to_bytes(4, "little"), digest_size=8).digest()
    rng = np.random.default_rng([seed, int.from_bytes(digest, "little")])
    noisy = noise.sample(np.broadcast_to(v, (draws, v.size)), rng)
    return float(np.mean(np.argmax(noisy, axis=1) == pos))


def _support(n: int, p: float, tail: float = 1e-12) -> np.ndarray:
    if p <= 0.0:
        return np.array([0])
    if p >= 1.0:
        return np.array([n])
    lo = int(stats.binom.ppf(tail, n, p))
    hi = int(stats.binom.isf(tail, n, p))
    return np.arange(max(0, lo - 1), min(n, hi + 1) + 1)


def detection_probability(tpr: float, fpr: float, n1: int, n0: int, claimed_epsilon: float, *,
                          confidence: float, delta: float) -> float:
    """P(epsilon_lower_bound(TP, FN, FP, TN) > claim) with TP ~ Bin(n1, tpr), FP ~ Bin(n0, fpr)
    independent (paired insertion: n1 member and n0 non-member trials).

    The bound (both directions) increases with TP and decreases with FP, so for each FP the
    detecting TPs are those >= a threshold t*(FP), found by a vectorised bisection; then
    P = sum_FP P(FP) P(TP >= t*(FP)). Exact up to the 1e-12 binomial tails of FP that are dropped."""
    if n1 < 1 or n0 < 1:
        return 0.0
    tpr, fpr = float(np.clip(tpr, 0, 1)), float(np.clip(fpr, 0, 1))
    fp = _support(n0, fpr)
    pfp = stats.binom.pmf(fp, n0, fpr)
    limit = claimed_epsilon * (1 + _REL_TOL) + 1e-12
    lo = np.full(fp.shape, -1)  # bound(lo) <= claim (or below range)
    hi = np.full(fp.shape, n1 + 1)  # bound(hi) > claim (or above range)
    while np.any(hi - lo > 1):
        mid = (lo + hi) // 2
        active = hi - lo > 1
        eps, _ = bound_curves(mid[active].astype(float), n1, fp[active].astype(float), n0, confidence, delta)
        good = eps > limit
        idx = np.flatnonzero(active)
        hi[idx[good]] = mid[active][good]
        lo[idx[~good]] = mid[active][~good]
    p_tp = stats.binom.sf(hi - 1, n1, tpr)  # P(TP >= t*); t* = n1 + 1 gives 0
    return float(np.clip(np.dot(pfp, p_tp), 0.0, 1.0))


def ceiling_epsilon(n1: int, n0: int, *, confidence: float, delta: float) -> float:
    """The bound of a perfect attack (TP = n1, FP = 0): the most these trials can show."""
    if n1 < 1 or n0 < 1:
        return 0.0
    eps, _ = bound_curves(np.array([float(n1)]), n1, np.array([0.0]), n0, confidence, delta)
    return float(eps[0])


@dataclass
class AlternativePower:
    name: str
    tpr: float  # P(released == positive | canary in), averaged over the vote model
    fpr: float
    detection_bound: float  # P(rigorous bound > claim) with these trials
    detection_conformance: float | None = None  # P(noise conformance test flags it), white-box only
    detection_floor: float | None = None  # P(release floor test flags it): exact for two labels, a lower bound beyond
    note: str = ""
    detection_white_box: float | None = None  # P(white-box bound > claim), generation design model (gen_power)

    @property
    def detection(self) -> float:
        """The audit flags the alternative if any of its tests does: at least the best one's power."""
        return max(self.detection_bound, self.detection_conformance or 0.0, self.detection_floor or 0.0,
                   self.detection_white_box or 0.0)


@dataclass
class PowerReport:
    claimed_epsilon: float
    confidence: float
    delta: float
    n_members: int
    n_nonmembers: int
    ceiling_epsilon: float
    vote_model: str  # "observed" | "assumed"
    vote_model_note: str
    design: dict[str, Any]
    alternatives: dict[str, AlternativePower]
    required: tuple[str, ...]
    min_detection: float
    sufficient: bool = False
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["alternatives"] = {k: {**asdict(a), "detection": a.detection} for k, a in self.alternatives.items()}
        d["required"] = list(self.required)
        return d


def _rates(noise: VotingNoise, vw: np.ndarray, vo: np.ndarray, positive: int, ties: str) -> tuple[float, float]:
    return (float(np.mean(release_probability(noise, vw, positive, ties=ties))),
            float(np.mean(release_probability(noise, vo, positive, ties=ties))))


def power_report(
    noise: VotingNoise, votes_with: np.ndarray, votes_without: np.ndarray, positive: int, *,
    n_members: int, n_nonmembers: int, claimed_epsilon: float, confidence: float, delta: float,
    vote_model: str, vote_model_note: str, required: Sequence[str] = DEFAULT_REQUIRED,
    min_detection: float = DEFAULT_MIN_DETECTION, conformance: Mapping[str, float] | None = None,
    partitions: int | None = None, floor_threshold: int | None = None,
) -> PowerReport:
    """Power of the black-box bound (and, where given, of the noise conformance test) against each
    named alternative. ``votes_with``/``votes_without``: (m, K) clean vote vectors under each
    hypothesis (observed, or the design's). ``confidence`` is the per-threat-model confidence the
    campaign used for the black-box bound. ``sufficient``: the claim is below the ceiling and
    every required alternative is detected with probability >= ``min_detection``."""
    vw = np.atleast_2d(np.asarray(votes_with, dtype=float))
    vo = np.atleast_2d(np.asarray(votes_without, dtype=float))
    ceiling = ceiling_epsilon(n_members, n_nonmembers, confidence=confidence, delta=delta)
    alts: dict[str, AlternativePower] = {}
    names = list(dict.fromkeys(["claimed", *ALTERNATIVES.keys()]))
    for name in names:
        nz = alternative_noise(noise, name)
        if nz.applied_scale == 0.0 or nz.winner_only:
            # The tie-break of a clean argmax is the implementation's: take the worse of the two.
            cands = [_rates(nz, vw, vo, positive, t) for t in TIES]
            dets = [detection_probability(a, b, n_members, n_nonmembers, claimed_epsilon, confidence=confidence,
                                          delta=delta) for a, b in cands]
            i = int(np.argmin(dets))
            tpr, fpr, det = cands[i][0], cands[i][1], dets[i]
            note = ("a clean argmax decides (no noise, or which label gets the noise): the worse of a tie-break "
                    "for and against the canary's label")
        else:
            tpr, fpr = _rates(nz, vw, vo, positive, "positive")
            det = detection_probability(tpr, fpr, n_members, n_nonmembers, claimed_epsilon, confidence=confidence,
                                        delta=delta)
            note = ""
        if name == "claimed":
            note = ("the claimed mechanism itself: detection here is a false alarm, <= 1 - confidence "
                    "by the bound's validity")
        conf_det = None if conformance is None else conformance.get(name)
        floor_det = None
        if floor_threshold is not None:
            from app.audit.conformance import release_floor_power

            if vw.shape[1] == 2:  # exact: the two counts add up to the trials
                floor_det = release_floor_power(tpr, fpr, n_members, n_nonmembers, floor_threshold)
            else:  # k labels: a lower bound, the best single label's power, each winning every clean tie
                floor_det = max(release_floor_power(*_rates(nz, vw, vo, j, "positive"), n_members, n_nonmembers,
                                                    floor_threshold, both=False) for j in range(vw.shape[1]))
        alts[name] = AlternativePower(name, tpr, fpr, det, conf_det, floor_det, note)
    design = {
        "partitions": partitions,
        "labels": int(vw.shape[1]),
        "release_changes_under_claim": abs(alts["claimed"].tpr - alts["claimed"].fpr) > 1e-9,
        "release_changes_without_noise": abs(alts["no_noise"].tpr - alts["no_noise"].fpr) > 1e-9,
    }
    rep = PowerReport(claimed_epsilon, confidence, delta, n_members, n_nonmembers, ceiling, vote_model,
                      vote_model_note, design, alts, tuple(required), min_detection)
    reasons = []
    # Only the white-box noise conformance test excuses a ceiling at or below the claim: the release floor sees
    # too little noise, not a release that leaks without being too deterministic -- a non-private gateway
    # (plain ICL, the model copies the canary: its label always with it, never without) releases each label
    # half the time, and only the bound can refute it (it passed the 5 x 2 design at claim 2, 40 trials, ceiling 1.60).
    by_conformance = all((alts[n].detection_conformance or 0.0) >= min_detection for n in required)
    if claimed_epsilon >= ceiling and not by_conformance:
        reasons.append(f"{n_members} + {n_nonmembers} counted trials at confidence {confidence:g} cannot show a "
                       f"bound above {ceiling:.3g}, so a claim of {claimed_epsilon:g} can never be refuted: add trials")
    no_change = not design["release_changes_without_noise"]
    if no_change and "no_noise" in required and alts["no_noise"].detection < min_detection:
        t = f"{partitions} partitions" if partitions else "this design"
        reasons.append(f"with {t} the canary moves one vote and a noise-free argmax never changes, and no "
                       "other test of this audit sees the missing noise, so a gateway that adds no noise would "
                       "pass: use more trials or a white-box audit (noise conformance)")
    for name in required:
        a = alts.get(name)
        if a is None:
            raise ValueError(f"unknown alternative {name!r}; use one of {', '.join(ALTERNATIVES)}")
        if a.detection < min_detection and not (name == "no_noise" and no_change):
            reasons.append(f"P(detect {name}) = {a.detection:.3g} < {min_detection:g} with these trials")
    rep.reasons = reasons
    rep.sufficient = not reasons
    return rep


ASSUMED_VOTE_NOTE = ("not observed (black-box): the best case for the auditor, the canary's partition votes the "
                     "canary label and the others the other label (tight-auditing Lemma 3.1); if the model does "
                     "not copy the canary, the real power is lower")


def per_threat_model_confidence(confidence: float, threat_models: int) -> float:
    """Each threat model's bound at 1 - (1 - c)/k (Bonferroni), so the headline maximum holds at c."""
    return 1.0 - (1.0 - confidence) / max(1, int(threat_models))


def design_power(noise: VotingNoise, *, labels: int, partitions: int, trials: int, claimed_epsilon: float,
                 confidence: float, threat_models: int, delta: float, floor: bool,
                 required: Sequence[str] = DEFAULT_REQUIRED, min_detection: float = DEFAULT_MIN_DETECTION,
                 conformance: Mapping[str, float] | None = None, moved: int = 1) -> PowerReport:
    """The power a direct, paired, black-box-counted canary audit of this design reports with its
    verdict under the assumed vote model (``design_votes``): the planner calls this, and the
    verdict's ``assess_power`` reaches the same ``power_report`` with the same inputs (counted trials
    trials // 2 per hypothesis, the campaign's Bonferroni confidence, the release floor's own
    threshold), so a plan's predicted detection is the verdict's reported power.
    ``floor``: the release floor test runs (rnm, no judge after the noise; its power exact for two labels,
    a lower bound for more: the best single label's, each label winning every clean tie)."""
    from app.audit.conformance import conformance_confidence, release_floor_threshold

    vw, vo = design_votes(labels, partitions, 0, 1, moved)
    half = trials // 2  # paired insertion rounds the trials down to even
    threshold = None
    if floor and labels >= 2 and half >= 1:
        threshold = release_floor_threshold(claimed_noise(noise), partitions, 2 * half,
                                            confidence=conformance_confidence(confidence), labels=labels)
    return power_report(noise, vw, vo, 0, n_members=half, n_nonmembers=half, claimed_epsilon=claimed_epsilon,
                        confidence=per_threat_model_confidence(confidence, threat_models), delta=delta,
                        vote_model="assumed", vote_model_note=ASSUMED_VOTE_NOTE, required=tuple(required),
                        min_detection=min_detection, conformance=conformance, partitions=partitions,
                        floor_threshold=threshold)
