"""Sequential (anytime-valid) canary audits: stop as soon as the evidence decides.

The fixed design (``app.audit.campaign``, ``app.audit.planner``) fixes its trials in advance so that
the Clopper-Pearson bound holds. Here trials are drawn in pairs (one trial with the canary, one
without, on the fixed contexts C1/C0 of tight-auditing Section 3.2) and the evidence is kept as
e-processes (``app.audit.eprocess``), following González, Dulce-Rubio, Ramdas & Ribero,
"Sequentially Auditing Differential Privacy" (NeurIPS 2025): under the null an e-process crosses
1/alpha with probability at most alpha at ANY stopping time (Ville's inequality), so the audit
looks after every batch and stops when it likes.

* **Violation** of the claim (epsilon, delta), a fixed-weight average of, per design arm:
  - "both right" (per pair, X = 1[canary label released | in] x 1[other label | out]): under
    (epsilon, delta)-DP E[X] <= p0^2 for ANY model and vote split (``eprocess.max_both_right``);
  - the pair accuracy (1[in right] + 1[out right]) / 2 <= p0 = (e^eps + delta) / (1 + e^eps);
  - for ``rnm`` queries the release floor (``conformance.min_release_probability``): every label's
    release frequency >= floor whatever the votes, bet on per label with a fraction learned per kind
    of trial, with and without the canary (``eprocess.SplitBetting``: winner-only noise is below the
    floor without the canary and above it with it); with k > 2 labels also their sum: a release
    other than the most released label so far has probability >= (k - 1) x floor (labels that no
    exemplar carries, *decoys*, make winner-only noise a gross violation: it never noises them); on
    the probe, its pair form: both right <= (1 - (k - 1) floor)^2;
  - where the target reports clean and noisy scores (white-box), the noise itself
    (``eprocess.NoiseEvidence``: scaled-down likelihood ratios, events of probability 0).
* **Pass**: every required alternative (``app.audit.power.ALTERNATIVES``) rejected at
  1/(1 - min_detection) (``pass_threshold``; Ville: a target that IS the alternative passes with
  probability <= 1 - min_detection at any stopping time, the miss probability the planner's fixed
  design and the fixed verdict's power promise, ``power.DEFAULT_MIN_DETECTION`` 0.9: one power
  model for the pass; the violation keeps 1/alpha) by a bet on
  1[released == canary label] - mu_a pointed towards the claim's mu_c (``_Alternative``, bettors
  ``eprocess.OnsGridMix``: ONS beside fixed fractions, so a strictly-true stretch costs little; a target
  more broken than a cannot reject a), mu_a the release probability under the alternative
  given the trial's clean votes (those the target reports, else the one-vote design model of
  tight-auditing Lemma 3.1, stated in the result as ``vote_model: "assumed"``); where a clean tie
  matters (no noise, winner-only) both tie-breaks must be rejected. White-box: averaged with the
  noise likelihood ratio of the claim over the alternative. Only the configured design's trials
  count towards a pass. Black-box, where the release floor applies, also every label's release rate
  shown above SPREAD x floor: a release beyond the claim (a label-mapping bug behind no noise
  releases the other label always) rejects every noise-multiplier alternative's directional bet
  and would pass; the claimed noise releases each label with probability >= floor whatever the votes.
  Black-box with a design vote model, also P(canary label | in) shown below the most (eps, delta)-DP
  allows beside the claim's rate without it (``dp_release_bound``): a non-private gateway (plain ICL,
  a copying model) lies beyond the claim on the canary's side and passed before this. Every null a
  pass needs is rejected the first time its e-process crosses 1/alpha, for good (Ville, per null).
* **Cap**: neither by the cap: inconclusive, with the e-values reached.

Design arms: the configured design, and optionally a *probe* (``run_sequential(probe=...)``): the
same mechanism on one partition holding every exemplar, one model call per trial, where the
canary decides the only vote. A gross violation (no noise, a tenth of the noise) shows there within
a few pairs; a correct or subtly broken target does not move it, so the probe runs first and is
dropped after ``PROBE_MIN_PAIRS`` pairs unless its "both right" rate is above the claim's p0^2
(a predictable rule: which arm draws next depends on the past only, so every process stays a
supermartingale on the joint filtration). Its violation processes weigh ``PROBE_WEIGHT``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from app.audit.eprocess import (BettingEProcess, NoiseEvidence, OnsGridMix, PlugInMix, SplitBetting, bernoulli_kl,
                                dp_release_bound, max_both_right, max_pair_accuracy, toward)
from app.audit.gateway import TargetError, TargetUnavailableError
from app.audit.insertion import exemplar_tuple, paired_contexts
from app.audit.noise import VotingNoise
from app.audit.power import (ALTERNATIVES, DEFAULT_MIN_DETECTION, TIES, alternative_noise, claimed_noise, design_votes,
                             release_probability)

Progress = Callable[[float, str], None]
DEFAULT_BATCH_PAIRS = 1
DEFAULT_CAP = 10_000  # trials, for trials "auto"
PROBE_MIN_PAIRS = 4
PROBE_MAX_PAIRS = 64
PROBE_WEIGHT = 0.1
# A pass on a design with a release floor also needs every label shown released at a rate
# above SPREAD x the floor: the claimed noise releases each label with probability >= floor whatever the
# votes, so a (near-)deterministic release -- a label never released, e.g. a label-mapping bug behind
# no noise, outside the noise-multiplier alternatives -- can then never pass before the floor test sees it.
# Any SPREAD > 0 excludes a label never released; the bet needs ~ln(1/level) / KL(floor || SPREAD x floor)
# trials per label, KL ~ floor x (ln(1/SPREAD) - 1 + SPREAD): at 0.25 it was the last null of a correct
# black-box pass on the README's decoy config (94 trials at claim 2, 267 prompts, against the fixed design's
# 210); at 0.1 it rejects ~2.2x sooner (50 trials, 135 prompts; docs/audit.md, "Where a sequential pass
# spends its trials"). The price: a label released at between 0.1 and 0.25 x the floor is left to the
# floor test's race with the pass, no longer excluded by the pass's own level.
SPREAD = 0.1
FIRST_BET = 0.6  # the violation bettors' first fraction (then ONS): predictable, so any value in [0, B_MAX] is valid


@dataclass
class Arm:
    """A design the audit draws trials from: a target (its mechanism's partitions fixed), the
    claimed noise of that design (None: no noise model), T for the design vote model."""

    target: Any
    partitions: int | None
    noise: VotingNoise | None
    name: str = "design"

    @property
    def calls_per_trial(self) -> int:
        return int(self.partitions or 1)


@dataclass
class SequentialResult:
    verdict: str  # violation | pass | inconclusive
    reason: str
    trials: int  # trials drawn (classify calls to the target), every arm
    pairs: int
    alpha: float
    e_violation: float
    e_components: dict[str, float]
    e_alternatives: dict[str, float]  # per required alternative: min over tie-breaks of its directional e-value
    vote_model: str  # observed | assumed
    cap: int
    p0: float  # the claim's largest pair accuracy
    accuracy: float  # observed mean pair accuracy (the configured design)
    seconds: float
    prompts: int = 0  # trials x partitions, every arm: the prompts the target's model answers
    pass_level: float = 1.0 - DEFAULT_MIN_DETECTION  # P(pass | the target is a required alternative) <= this
    arms: dict[str, dict[str, Any]] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # a pass's nulls rejected (sticky, each at its first crossing of 1/(1 - min_detection)): name -> trials, e
    rejected: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Alternative:
    """Directional e-processes for H_a: "P(release positive | votes) is mu_a, or further from the
    claimed noise's mu_c than mu_a" (one per tie-break that matters). Each trial's bet points from
    mu_a towards mu_c (no bet where they are equal): under H_a the payoff has mean <= 0, so the
    wealth is a test supermartingale, and a target MORE broken than a (less noise than a) cannot
    reject a and pass -- a two-sided bet would (found for generation audits, h33-genseq)."""

    def __init__(self, name: str, noise: VotingNoise, positive: int, draws: int) -> None:
        self.name = name
        self.claimed = claimed_noise(noise)
        self.noise = alternative_noise(noise, name)
        self.ties = TIES if (self.noise.applied_scale == 0.0 or self.noise.winner_only) else TIES[:1]
        self.positive, self.draws = positive, draws
        self.procs = {t: OnsGridMix(+1) for t in self.ties}
        self._mu: dict[tuple[int, str, tuple[float, ...]], float] = {}

    def mu(self, votes: np.ndarray, tie: str, claimed: bool = False, label: int | None = None) -> float:
        """P(release ``label`` (default: the positive) | votes) under the alternative (or the claim)."""
        lab = self.positive if label is None else int(label)
        key = (lab, "claimed" if claimed else tie, tuple(float(x) for x in votes))
        if key not in self._mu:
            noise = self.claimed if claimed else self.noise
            self._mu[key] = float(release_probability(noise, votes, lab, ties=tie, draws=self.draws)[0])
        return self._mu[key]

    def update(self, released: int, votes: np.ndarray) -> None:
        """``released``: the released label's index (-1: none of the query's labels). With more than two
        labels the trial's bet is on the positive label or on the clean winner, whichever the claim and
        the alternative tell further apart (Bernoulli KL): winner-only noise leaves the zero-vote labels
        without noise, so it moves the winner's release rate far more than the canary label's (docs/audit.md,
        "Decoy labels"). The choice is a function of the trial's votes, so each bet still has mean <= 0
        under H_a given them."""
        mc = self.mu(votes, TIES[0], claimed=True)
        w = int(np.argmax(votes))
        for t, proc in self.procs.items():
            m, x, mc_x = self.mu(votes, t), float(released == self.positive), mc
            if len(votes) > 2 and w != self.positive:
                mcw, mw = self.mu(votes, TIES[0], claimed=True, label=w), self.mu(votes, t, label=w)
                if bernoulli_kl(mcw, mw) > bernoulli_kl(mc, m):
                    m, x, mc_x = mw, float(released == w), mcw
            proc.update(x, m, toward(mc_x, m))

    @property
    def e(self) -> float:
        return min(p.e for p in self.procs.values())


class _ArmState:
    """One arm's e-processes: its violation mixture, its alternatives, its white-box noise evidence."""

    def __init__(self, arm: Arm, attack: Any, *, p0: float, c2: float, alternatives: Sequence[str],
                 release_floor: bool, draws: int, epsilon: float = 0.0, delta: float = 0.0) -> None:
        self.arm = arm
        pos, k = attack.positive_index, len(attack.labels)
        self.pos, self.p0, self.c2 = pos, p0, c2
        noise = None if arm.noise is None else claimed_noise(arm.noise)
        self.probe = arm.name == "probe"
        self.acc, self.both, self.floor_both = (BettingEProcess(+1, FIRST_BET) for _ in range(3))
        self.floor: float | None = None
        self.floors: dict[int, SplitBetting] = {}
        self.spread: dict[int, PlugInMix] = {}  # H0: label i released with probability <= SPREAD x floor
        # k > 2: H0 "P(release != the most released label so far) >= (k - 1) x floor", the floors' sum
        self.others: SplitBetting | None = None
        self.counts = np.zeros(k)
        if release_floor and noise is not None and k >= 2 and arm.partitions:
            from app.audit.conformance import min_release_probability

            self.floor = min_release_probability(noise, arm.partitions, k)
            self.floors = {i: SplitBetting(-1, FIRST_BET) for i in range(k)}
            if k > 2:
                self.others = SplitBetting(-1, FIRST_BET)
        white = bool(getattr(arm.target, "white_box", False)) and k >= 2
        self.noise_ev = (NoiseEvidence(noise, {a: alternative_noise(noise, a) for a in alternatives})
                         if white and noise is not None else None)
        if self.floors and self.noise_ev is None:  # white-box: a release not the argmax of its noisy scores is
            self.spread = {i: PlugInMix(+1) for i in range(k)}  # already an event of probability 0
        self.alts = {} if noise is None else {a: _Alternative(a, noise, pos, draws) for a in alternatives}
        self.design = None
        if arm.partitions and noise is not None:
            neg = attack.negative_index if attack.negative_index is not None else (1 if pos == 0 else 0)
            self.design = design_votes(k, arm.partitions, pos, neg)
        # H: P(canary label | in) >= leak_bound, the most (epsilon, delta)-DP allows beside the claim's own
        # release rate without the canary (design model); black-box only, bet on the canary's trials
        self.leak: PlugInMix | None = None
        self.leak_plug = 0.0  # the claim's P(canary label | in) under the design model: the leak bets' plug-in
        self.leak_bound = 1.0
        if self.alts and self.design is not None and self.noise_ev is None:
            out = next(iter(self.alts.values())).mu(self.design[1], TIES[0], claimed=True)
            self.leak_bound = dp_release_bound(out, epsilon, delta)
            self.leak_plug = next(iter(self.alts.values())).mu(self.design[0], TIES[0], claimed=True)
            if self.leak_bound < 1.0:
                self.leak = PlugInMix(-1)
        self.trials = self.pairs = 0
        self.correct = self.both_right = 0.0
        self.observed = self.assumed = False

    def weights(self) -> list[tuple[str, float, Any]]:
        """(name, fixed weight, process with ``.e``) of this arm's violation mixture; the weights sum
        to 1. The configured design leans on the release floor (one vote of T moves: the pair
        statistics barely move); the probe (one partition: the canary decides the vote) on the pairs."""
        black = 0.5 if self.noise_ev is not None else 1.0
        out: list[tuple[str, float, Any]] = []
        if self.floors and self.probe:
            out += [("floor_both_right", 0.8 * black, self.floor_both), ("both_right", 0.2 * black, self.both)]
        elif self.floors and self.others is not None:  # decoy labels: the floors' sum carries most
            out += [("both_right", 0.1 * black, self.both), ("release_floor_others", 0.45 * black, self.others)]
            out += [(f"release_floor_{i}", 0.45 * black / len(self.floors), p) for i, p in self.floors.items()]
        elif self.floors:
            out += [("both_right", 0.1 * black, self.both)]
            out += [(f"release_floor_{i}", 0.45 * black, p) for i, p in self.floors.items()]
        else:
            out += [("both_right", 0.6 * black, self.both), ("accuracy", 0.4 * black, self.acc)]
        if self.noise_ev is not None:
            out.append(("noise", 0.5, self.noise_ev))
        return out

    def e_violation(self) -> float:
        return float(sum(w * p.e for _, w, p in self.weights()))

    def pass_processes(self) -> dict[str, float]:
        """Every e-process a pass needs rejected, by name: each alternative's per tie-break (white-box:
        averaged with the noise's likelihood ratio, an e-process under the same null), the spread and the
        leak bound. Each is a test supermartingale under its own null, so each may be rejected the first
        time it crosses 1/alpha, for good (Ville): a pass needs every one rejected, not all at once."""
        out: dict[str, float] = {}
        for name, alt in self.alts.items():
            for t, proc in alt.procs.items():
                e = proc.e
                if self.noise_ev is not None:
                    e = 0.5 * (e + self.noise_ev.e_alternative(name))
                out[f"{name}:{t}"] = e
        for i, p in self.spread.items():
            out[f"spread:{i}"] = p.e
        if self.leak is not None:
            out["leak"] = self.leak.e
        return out

    def e_alternative(self, name: str) -> float:
        e = self.alts[name].e if name in self.alts else 1.0
        if self.noise_ev is not None:
            e = 0.5 * (e + self.noise_ev.e_alternative(name))
        return e

    def e_spread(self) -> float | None:
        """min over the labels of the e-value against "released with probability <= SPREAD x floor"."""
        return min(p.e for p in self.spread.values()) if self.spread else None

    def draw_pair(self, contexts: Mapping[bool, Any], attack: Any, rng: np.random.Generator) -> None:
        rel: dict[bool, int] = {}
        for member in ((True, False) if rng.random() < 0.5 else (False, True)):
            obs = self.arm.target.observe(contexts[member], attack, rng)
            r = attack.labels.index(obs.label) if obs.label in attack.labels else -1
            rel[member] = r
            votes = getattr(obs, "clean_votes", None)
            v: np.ndarray | None
            if votes is not None:
                self.observed = True
                v = np.asarray(votes, dtype=float)
            elif self.design is not None:
                self.assumed = True
                v = self.design[0] if member else self.design[1]
            else:
                v = None
            if v is not None:
                for a in self.alts.values():
                    a.update(r, v)
            if member and self.leak is not None:
                self.leak.update(float(r == self.pos), self.leak_bound, self.leak_plug)
            noisy = getattr(obs, "noisy_scores", None)
            if self.noise_ev is not None and votes is not None and noisy is not None:
                self.noise_ev.update(votes, noisy, r)
            plug = {i: 0.5 for i in self.spread}  # the spread bets' plug-in: the claim's release law on this trial
            if self.spread and v is not None and self.alts:
                a0 = next(iter(self.alts.values()))
                plug = {i: a0.mu(v, TIES[0], claimed=True, label=i) for i in self.spread}
            if self.others is not None:  # the most released label so far: predictable (the past only)
                top = int(np.argmax(self.counts))
                self.others.update(float(r != top), (len(self.floors) - 1) * float(self.floor or 0.0), member)
            if 0 <= r < self.counts.size:
                self.counts[r] += 1
            for i, proc in self.floors.items():  # the floor holds for every trial, with or without the canary;
                proc.update(float(r == i), float(self.floor or 0.0), member)  # a fraction learned per kind
                if self.spread:
                    self.spread[i].update(float(r == i), SPREAD * float(self.floor or 0.0), plug[i])
        self.trials += 2
        self.pairs += 1
        x = 0.5 * (float(rel[True] == self.pos) + float(rel[False] != self.pos))
        h = float(rel[True] == self.pos and rel[False] != self.pos)
        self.correct += x
        self.both_right += h
        self.acc.update(x, self.p0)
        self.both.update(h, self.c2)
        if self.probe and self.floor is not None:  # under the floors P(in right), P(out right) <= 1 - (k-1) floor
            self.floor_both.update(h, (1.0 - (len(self.floors) - 1) * self.floor) ** 2)

    def summary(self) -> dict[str, Any]:
        return {"partitions": self.arm.partitions, "trials": self.trials, "pairs": self.pairs,
                "prompts": self.trials * self.arm.calls_per_trial, "e_violation": self.e_violation(),
                "components": {n: p.e for n, _, p in self.weights()},
                "both_right_rate": self.both_right / max(1, self.pairs), "white_box": self.noise_ev is not None,
                **({"e_spread": self.e_spread()} if self.spread else {}),
                **({"e_leak": self.leak.e, "leak_bound": self.leak_bound} if self.leak is not None else {}),
                **({"impossible": list(self.noise_ev.impossible)} if self.noise_ev is not None else {})}


def run_sequential(target: Any, exemplars: Sequence[tuple[str, str]], attack: Any, *, claimed_epsilon: float,
                   delta: float, noise: VotingNoise | None, partitions: int | None, alternatives: Sequence[str],
                   alpha: float, cap: int, rng: np.random.Generator, batch_pairs: int = DEFAULT_BATCH_PAIRS,
                   release_floor: bool = True, draws: int = 200_000, progress: Progress | None = None,
                   probe: Arm | None = None, min_detection: float = DEFAULT_MIN_DETECTION) -> SequentialResult:
    """Draw pairs until the violation e-process crosses 1/alpha, or every required alternative's
    crosses ``pass_threshold(min_detection)`` = 1/(1 - min_detection), or ``cap`` trials (every arm).
    ``min_detection``: the job's ``config.power.min_detection``; the default is the fixed power
    report's (``power.DEFAULT_MIN_DETECTION``, 0.9), so a library caller gets the promise the plan
    states. ``noise``: the claimed noise (None: no alternative can be
    modelled, so the audit can end violation or inconclusive only); ``partitions``: T for the design
    vote model where the target reports no clean votes; ``release_floor``: add the release floor
    test (rnm without a judge after the noise); ``probe``: a one-partition arm drawn first (see the
    module docstring)."""
    pass_at = pass_threshold(alpha, min_detection)
    if cap < 2 or batch_pairs < 1:
        raise ValueError("the cap needs >= 2 trials and a batch >= 1 pair")
    t0 = time.perf_counter()
    report = progress or (lambda _f, _m: None)
    ex = [exemplar_tuple(e) for e in exemplars]
    c1, c0 = paired_contexts(ex, attack.canary.exemplar(), int(rng.integers(len(ex))))
    contexts = {True: c1, False: c0}
    p0 = max_pair_accuracy(claimed_epsilon, delta)
    c2 = max_both_right(claimed_epsilon, delta)
    opts: dict[str, Any] = {"p0": p0, "c2": c2, "alternatives": list(alternatives) if noise is not None else [],
            "release_floor": release_floor, "draws": draws, "epsilon": claimed_epsilon, "delta": delta}
    main = _ArmState(Arm(target, partitions, noise), attack, **opts)
    arms = [main]
    pr = None
    if probe is not None and probe.noise is not None:
        pr = _ArmState(probe, attack, **{**opts, "alternatives": []})  # its trials do not count for a pass
        arms = [pr, main]
    w_probe = PROBE_WEIGHT if pr is not None else 0.0
    notes: list[str] = []
    if noise is None and alternatives:
        notes.append("no noise model for this target: no alternative can be rejected, so no pass")
    threshold = 1.0 / alpha
    history: list[dict[str, float]] = []
    verdict, reason = "inconclusive", ""

    def e_viol() -> float:
        return (1.0 - w_probe) * main.e_violation() + (w_probe * pr.e_violation() if pr is not None else 0.0)

    def e_alts() -> dict[str, float]:
        return {a: main.e_alternative(a) for a in main.alts}

    def trials() -> int:
        return sum(s.trials for s in arms)

    probing = pr is not None
    rejected: dict[str, dict[str, float]] = {}  # a pass's nulls rejected so far (sticky): first crossing
    while trials() + 2 <= cap:
        if probing and pr is not None:
            try:
                pr.draw_pair(contexts, attack, rng)
            except (TargetError, ValueError) as exc:
                if pr.pairs or isinstance(exc, TargetUnavailableError):
                    raise
                # the target refuses the one-partition design (a prompt too long, a gateway's limit): the
                # probe stops where it is (a stopped e-process is one) and the configured design goes on
                notes.append(f"the one-partition probe was refused by the target ({type(exc).__name__}); "
                             "the configured design ran alone")
                probing = False
                continue
            if pr.pairs >= PROBE_MAX_PAIRS or (pr.pairs >= PROBE_MIN_PAIRS and pr.both_right / pr.pairs <= c2):
                probing = False
        else:
            for _ in range(min(batch_pairs, (cap - trials()) // 2)):
                main.draw_pair(contexts, attack, rng)
        ev, ea = e_viol(), e_alts()
        history.append({"trials": trials(), "e_violation": ev, **{f"e_{n}": v for n, v in ea.items()}})
        report(min(0.99, trials() / cap), f"sequential: {trials()} trials, e-value {ev:.3g} (violation at "
               f"{threshold:g})")
        if ev >= threshold:
            verdict = "violation"
            reason = (f"the e-value against the claim epsilon {claimed_epsilon:g} reached {ev:.4g} >= 1/alpha = "
                      f"{threshold:g} after {trials()} trials (anytime-valid at level {alpha:g}; mostly "
                      f"{_top(arms, pr, w_probe)})")
            break
        needed = main.pass_processes()
        for n, v in needed.items():
            if v >= pass_at and n not in rejected:
                rejected[n] = {"trials": trials(), "e": v}
        if ea and len(ea) == len(alternatives) and all(n in rejected for n in needed):
            verdict = "pass"
            spread = [n for n in needed if n.startswith("spread:")]

            def by(names: Sequence[str]) -> int:
                return int(max(rejected[n]["trials"] for n in names))

            reason = (f"no violation (e-value {ev:.3g} < 1/alpha = {threshold:g}) and every required alternative "
                      f"rejected (e-value >= 1/(1 - min_detection) = {pass_at:g}, each the first time it crossed: a "
                      f"target that is one passes with probability <= {1.0 - min_detection:g}, the planner's miss "
                      f"rate) after {trials()} trials: "
                      + ", ".join(f"{a} by trial {by([n for n in needed if n.split(':')[0] == a])}" for a in ea)
                      + ("" if not spread else f"; each label released at a rate above {SPREAD:g} x the claim's "
                         f"floor {main.floor:.3g} (no near-deterministic release) by trial {by(spread)}")
                      + ("" if "leak" not in needed else
                         f"; the canary's label released with the canary below {main.leak_bound:.3g}, the most "
                         f"(epsilon, delta)-DP allows beside the claim's rate without it, by trial {by(['leak'])}"))
            break
    observed = any(s.observed for s in arms)
    assumed = any(s.assumed for s in arms)
    vote_model = "observed" if observed and not assumed else "assumed"
    ea = e_alts()
    if verdict == "inconclusive":
        still = [n for n in main.pass_processes() if n not in rejected]
        open_ = [n for n in alternatives if n not in ea or any(k.split(":")[0] == n for k in still)]
        guards = sorted({k.split(":")[0] for k in still if k.split(":")[0] not in ea})  # spread, leak
        reason = (f"cap of {cap} trials reached: e-value against the claim {e_viol():.3g} < {threshold:g}, and "
                  + (", ".join([f"{n} e={ea.get(n, 0.0):.3g}" for n in open_] + guards) or "no alternative")
                  + f" not rejected (at {pass_at:g}): not a pass")
    impossible = [f for s in arms if s.noise_ev is not None for f in s.noise_ev.impossible]
    if impossible:
        notes.append("white-box: " + "; ".join(dict.fromkeys(impossible)))
    if vote_model == "assumed" and opts["alternatives"]:
        notes.append("the alternatives' release probabilities use the one-vote design model (tight-auditing Lemma "
                     "3.1; the target reports no clean votes): a pass says the target is not the alternative as "
                     "that model predicts it")
    untested = [a for a in ALTERNATIVES if a != "claimed" and a not in alternatives]
    if verdict == "pass" and untested:  # what a pass does not show (docs/audit.md, "Hard to catch black-box")
        notes.append(f"a pass rules out the required alternatives only: {', '.join(untested)} were not tested (add "
                     "them to power.alternatives)" + ("; winner-only noise moves release rates by a few points, so "
                     "black-box it needs many times the trials of this pass (white-box sees it in one answer), unless "
                     "the query has labels that no exemplar carries (dataset.decoy_labels: then the release floor "
                     "sees it in ~100-150 prompts)" if "winner_only" in untested and main.noise_ev is None else ""))
    if pr is not None and pr.trials:
        notes.append(f"a one-partition probe drew {pr.trials} trials first ({pr.trials} model calls), weight "
                     f"{w_probe:g} in the violation e-value")
    report(1.0, "sequential audit done")
    comps = {f"{s.arm.name}:{n}" if pr is not None else n: p.e for s in arms for n, _, p in s.weights()}
    return SequentialResult(verdict, reason, trials(), sum(s.pairs for s in arms), alpha, e_viol(), comps, ea,
                            vote_model, cap, p0, main.correct / max(1, main.pairs), time.perf_counter() - t0,
                            sum(s.trials * s.arm.calls_per_trial for s in arms), 1.0 - min_detection,
                            {s.arm.name: s.summary() for s in arms}, history[-200:], notes, rejected)




def pass_threshold(alpha: float, min_detection: float) -> float:
    """The e-value at which a required alternative is rejected: 1/(1 - min_detection). By Ville's
    inequality a target that IS the alternative crosses it with probability <= 1 - min_detection at
    any stopping time: a pass misses an alternative no more often than the fixed design's planned
    power allows (one power model; where min_detection > 1 - alpha the pass is the stricter). The
    violation threshold stays 1/alpha. Checks both levels."""
    if not 0.0 < alpha < 1.0:
        raise ValueError("alpha must lie in (0, 1)")
    if not 0.0 < min_detection < 1.0:
        raise ValueError("min_detection must lie in (0, 1)")
    return 1.0 / (1.0 - min_detection)


def _top(arms: Sequence[_ArmState], pr: _ArmState | None, w_probe: float) -> str:
    best, name = -1.0, ""
    for s in arms:
        scale = w_probe if s is pr else (1.0 - w_probe)
        for n, w, p in s.weights():
            if scale * w * p.e > best:
                best, name = scale * w * p.e, (f"{s.arm.name} {n}" if pr is not None else n)
    return name


__all__ = ["ALTERNATIVES", "Arm", "BettingEProcess", "SequentialResult", "max_pair_accuracy", "pass_threshold",
           "run_sequential"]
