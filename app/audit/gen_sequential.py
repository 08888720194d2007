"""Sequential (anytime-valid) generation canary audits: stop as soon as the evidence decides.

The generation analogue of ``app.audit.sequential`` (read its docstring first), after González,
Dulce-Rubio, Ramdas & Ribero, "Sequentially Auditing Differential Privacy" (NeurIPS 2025): the
audit draws trials in batches of pairs on the fixed contexts C1 (the canary in place of one
exemplar) and C0 (without it; tight-auditing Section 3.2, the fixed generation audit's paired
insertion), turns each released text into the signal decision of tight-auditing 3.4 (the answer is
y1, "the canary is there", iff it is nearer y1 than y0 in the auditor's embedding:
``gen_targets.SignalDecider``), and keeps the evidence as e-processes: test supermartingales under
their nulls, so by Ville's inequality each crosses 1/alpha with probability <= alpha at ANY
stopping time, and the audit may look after every batch.

* Violation of the claim (epsilon, delta): the pair accuracy of the fixed guess "y1 was released"
  X = (1[y1 | canary in] + 1[not y1 | canary out]) / 2 has E[X] <= p0 = (e^eps + delta)/(1 + e^eps)
  under (epsilon, delta)-DP for ANY model and prompt (TPR <= e^eps FPR + delta and
  1 - FPR <= e^eps (1 - TPR) + delta at their symmetric point: ``sequential.max_pair_accuracy``;
  González et al.'s black-box test of membership accuracy), and "both right"
  1[y1 | in] x 1[not y1 | out] has mean <= p0^2 (``eprocess.max_both_right``); the same for the
  mirrored guess, and a bet on each of the four single-event inequalities P(E | in) <= e^eps
  P(E | out) + delta (and in / out swapped; E = y1, y0) that the pair accuracy averages: a release
  rare on both contexts exceeds one of them while the average stays in its null
  (``app.audit.pair_bets``: esa on 4 partitions at a tenth of its noise). The violation e-value is a
  fixed-weight average of these bets; crossing 1/alpha is a violation, whatever model the target
  serves.
* Pass: every required alternative of ``app.audit.gen_power`` (noise x 1/2, 1/4, 1/10, no_noise,
  non_private) is rejected, at 1/(1 - min_detection) (``sequential.pass_threshold``: a target that IS
  alternative a passes with probability <= 1 - min_detection, the planner's and the fixed verdict's
  miss rate; the violation stays at 1/alpha). Under alternative a a trial releases y1 with the probability
  ``gen_power.alternative_release(design, a)`` gives for its hypothesis -- the same per-trial law
  the planner and the fixed verdict's power use (one power model; no formula is repeated here). A
  betting e-process on 1[y1 released] - mu_a rejects a, each trial's bet pointed from
  mu_a towards the claimed law's mu_c (``GenAlternative``: its null is "a, or further from the
  claim", so a target more broken than a cannot pass either); for deterministic decoding both
  tie-breaks of a clean tie must be rejected (the minimum of their e-values). The law
  is gen_power's *design model*, the auditor's best case (the canary's unit follows the signal query:
  ``gen_power.GEN_MODEL_NOTE``); the result says ``vote_model: "assumed"`` and why in its notes: a
  pass says the target is not the alternative *as that model predicts it*.
* White-box (``white_box=True`` and a target that reports its clean and noisy statistic: esa's
  clean and noisy mean, in-process or a gateway's internals; in-process clip_softmax, poe and mozo: each
  private step's clean statistic through ``app.mechanisms.step_trace``, the target's
  ``trace_token_steps`` turned on for the audit only; ksa's gaps, k* and test outcome from its
  internals, ``app.audit.gen_noise_ksa``): ``app.audit.gen_noise`` reads the noise
  with ``eprocess.NoiseEvidence``. The violation e-value is then 1/2 the black-box mixture above + 1/2
  the noise's (scaled-down likelihood ratios, events of probability 0: a zero residual, a release
  that is not the candidate nearest the noisy mean, a token outside the candidates); each
  alternative's e-value is 1/2 its bet + 1/2 the likelihood ratio of the claimed noise over the
  alternative's (an alternative the noise does not cover, e.g. non_private for the token mechanisms:
  its bet alone). Mechanisms whose internals do
  not carry the noise (``gen_noise.WHITE_BOX_GAPS``) stay black-box, with a note saying why.
  ``decided_by`` says which half carried the verdict.
* Cap: neither by the cap: inconclusive, with the e-values reached. Without a design model (the
  L3 judge, a mechanism that claims nothing) only the violation test runs: violation or inconclusive.
* Probe (``probe``: ``app.audit.probe.gen_probe_target``, black-box audits of a design of several
  units): with T units the canary is one unit's prompt of T, and esa's design model says why a gross
  violation can hide there: the mean's gap with the canary, r d (1/T - 1/2), is below 0 for T > 2, so
  a noise-free esa releases y0 with and without the canary (no pair statistic moves; issue 28's "esa
  black-box, noise x 1/10 and no noise: inconclusive at the cap"). On one unit holding every exemplar
  the gap is r d / 2 > 0: the canary decides the release. The probe is the same mechanism and claim
  on that design (its own calibration), drawn first, as the classification audit's
  (``sequential``'s module docstring: ``PROBE_MIN_PAIRS`` pairs, kept while its "both right" rate is
  above p0^2, at most ``PROBE_MAX_PAIRS``; which arm draws next depends on the past only). Its own
  four violation bets weigh ``PROBE_WEIGHT`` of the black-box mixture (a fixed-weight average of test
  supermartingales under the claim is one); its trials count towards the cap, never towards a pass.

Bets: ``sequential.BettingEProcess`` (online Newton step on the betting fraction, Cutkosky & Orabona
2018, clipped to [0, B_MAX]): predictable, so each wealth process is a test supermartingale.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.audit.gateway import TargetError, TargetUnavailableError
from app.audit.gen_model_check import MODEL_CHECK_DELTA, fits, pairs_needed
from app.audit.gen_noise import TOKEN, noise_finding, observe_noise, white_box_evidence, white_box_gap
from app.audit.gen_power import (GEN_ALTERNATIVES, GEN_MODEL_NOTE, GenerationDesign, alternative_release,
                                  alternative_ties)
from app.audit.insertion import exemplar_tuple, paired_contexts
from app.audit.power import DEFAULT_MIN_DETECTION
from app.audit.sequential import (DEFAULT_BATCH_PAIRS, DEFAULT_CAP, FIRST_BET, PROBE_MAX_PAIRS, PROBE_MIN_PAIRS,
                                  PROBE_WEIGHT, BettingEProcess, Progress, SequentialResult, pass_threshold)
from app.audit.eprocess import NoiseEvidence, OnsGridMix, max_both_right, max_pair_accuracy, toward
from app.audit.pair_bets import PairBets, design_weights

# A black-box pass rests on the design model; the check it waits for (MODEL_CHECK_DELTA, Z_BLOCK, the
# pairs a test of the claimed law needs) is app.audit.gen_model_check's, shared with the fixed verdict.
# The violation e-value's bettors and weights: app.audit.pair_bets (the guess "y1 released: canary in",
# its mirror, and the four single-event DP inequalities a rare release exceeds).

ASSUMED_NOTE = ("the alternatives' release probabilities are gen_power's design model, not observed: " + GEN_MODEL_NOTE
                + "; a pass says the target is not the alternative as that model predicts it")


@dataclass
class GenSequentialResult(SequentialResult):
    design: dict[str, Any] | None = None  # the design model's constants (None: no power model)
    laws: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # alt -> tie -> [P(y1 | in), P(y1 | out)]
    y1_with: float = 0.0  # observed share of y1 releases with the canary
    y1_without: float = 0.0
    decided_by: str = ""  # white-box | black-box | white-box and black-box ("": inconclusive)
    white_box: dict[str, Any] = field(default_factory=dict)  # the noise evidence: trials read, e-values, findings


class GenAlternative:
    """A one-sided e-process per tie-break of a clean argmax that alternative a allows, against the
    composite null "the target is a, or further than a from the claimed release law": on a trial
    of hypothesis h (canary in / out) the bet is on 1[y1] against mu_a(h) in the direction of the
    claimed law's mu_c(h) (H0: E[1[y1]] <= mu_a(h) where mu_c(h) > mu_a(h), >= where below; no bet
    where they are equal, as that trial cannot tell a from the claim). A two-sided bet would also
    reject a for a target further from the claim than a (esa at sigma / 16 rejects sigma / 10) and
    pass it; the directional one keeps P(pass) <= 1 - min_detection for every such target."""

    def __init__(self, name: str, design: GenerationDesign) -> None:
        self.name = name
        claimed = alternative_release(design, "claimed")
        self.law = {t: alternative_release(design, name, t) for t in alternative_ties(name)}
        self.side = {t: tuple(toward(c, m) for c, m in zip(claimed, law)) for t, law in self.law.items()}
        self.procs = {t: OnsGridMix(+1) for t in self.law}

    def update(self, y1: float, member: bool) -> None:
        h = 0 if member else 1
        for t, proc in self.procs.items():
            proc.update(y1, self.law[t][h], self.side[t][h])

    @property
    def e(self) -> float:
        return min(p.e for p in self.procs.values())


class DesignModelCheck:
    """A two-sided test of "the target releases y1 with the claimed law's probability mu_c(h)" on the
    trials of each hypothesis h (canary in / out): four one-sided betting e-processes (up and down,
    per h), averaged: a test supermartingale when the target follows the design model's claimed law.
    Refuted (>= 1/alpha) once, it stays refuted: no black-box pass after that; nor while ``fits`` says
    a share lies more than Z_BLOCK standard errors from the claimed law's (a betting test needs more
    pairs than ``pairs_needed`` to refute a shift it will refute; an unlucky start slows it more)."""

    def __init__(self, design: GenerationDesign) -> None:
        self.law = alternative_release(design, "claimed")
        self.procs = {(h, side): BettingEProcess(side, FIRST_BET) for h in (0, 1) for side in (+1, -1)}
        self.refuted = False

    def update(self, y1: float, member: bool, threshold: float) -> None:
        h = 0 if member else 1
        for side in (+1, -1):
            self.procs[(h, side)].update(y1, self.law[h], side)
        self.refuted = self.refuted or self.e >= threshold

    @property
    def e(self) -> float:
        return sum(p.e for p in self.procs.values()) / len(self.procs)

    def fits(self, y1_with: int, y1_without: int, pairs: int) -> bool:
        """Both observed shares of y1 within Z_BLOCK standard errors of the claimed law's."""
        return fits(self.law, y1_with, y1_without, pairs)

    def allows_pass(self, y1_with: int, y1_without: int, pairs: int, min_pairs: int) -> bool:
        """A black-box pass may rest on the design model: ``min_pairs`` seen, never refuted, ``fits`` now."""
        return not self.refuted and pairs >= min_pairs and self.fits(y1_with, y1_without, pairs)

    def pairs_needed(self, alpha: float) -> int:
        """``gen_model_check.pairs_needed`` of the claimed law (the fixed planner adds the same)."""
        return pairs_needed(self.law, alpha)


def design_summary(design: GenerationDesign) -> dict[str, Any]:
    return {"mechanism": design.mechanism, "units": design.units, "noise_scale": design.scale,
            "law": design.law, "coverage": design.coverage, "signal_distance": design.signal_distance}


def run_gen_sequential(target: Any, exemplars: Sequence[tuple[str, str]], attack: Any, *, claimed_epsilon: float,
                       delta: float, design: GenerationDesign | None, alternatives: Sequence[str], alpha: float,
                       cap: int = DEFAULT_CAP, rng: np.random.Generator, batch_pairs: int = DEFAULT_BATCH_PAIRS,
                       no_model: str | None = None, progress: Progress | None = None,
                       white_box: bool = False, min_detection: float = DEFAULT_MIN_DETECTION,
                       probe: Any = None) -> GenSequentialResult:
    """Draw pairs in batches of ``batch_pairs`` until the violation e-process crosses 1/alpha, or
    every required alternative's 1/(1 - min_detection) (and the design-model check allows a
    black-box pass), or ``cap`` trials. ``min_detection``: ``config.power.min_detection`` (default
    ``power.DEFAULT_MIN_DETECTION``, the fixed power report's). ``design``: gen_power's design model of the
    target (None: no alternative can be modelled, ``no_model`` says why; violation or inconclusive).
    ``white_box``: also read the noise the target reports (``app.audit.gen_noise``). ``probe``: a
    one-unit design of the same mechanism and claim, drawn first (module docstring; black-box only:
    where the noise is read, it decides a gross violation in a pair and the probe is not drawn)."""
    pass_threshold(alpha, min_detection)  # checks both levels
    if cap < 2 or batch_pairs < 1:
        raise ValueError("the cap needs >= 2 trials and a batch >= 1 pair")
    if getattr(attack, "decision", "signal") != "signal":
        raise ValueError("a sequential generation audit decides y1 / y0: use a signal query (not the repeat attack)")
    t0 = time.perf_counter()
    report = progress or (lambda _f, _m: None)
    ex = [exemplar_tuple(e) for e in exemplars]
    notes: list[str] = []
    if design is None:
        notes.append("no design model for this target" + (f" ({no_model})" if no_model else "")
                     + ": no alternative can be rejected, so no pass")
    elif alternatives:
        notes.append(ASSUMED_NOTE)
    noise = white_box_evidence(design, alternatives, claimed_epsilon, delta) if white_box else None
    trace = getattr(target, "trace_token_steps", None)  # in-process token targets: app.mechanisms.step_trace
    token = design is not None and design.mechanism in TOKEN  # read through the step trace only
    if noise is not None and token and not callable(trace):
        mech = design.mechanism if design is not None else ""
        noise = None  # a remote (or any other) target offers no token statistic
        notes.append(f"white-box: {mech} is audited black-box only: {white_box_gap(mech, remote=True)}")
    elif white_box and design is not None and noise is None:
        notes.append(f"white-box: {design.mechanism} is audited black-box only: {white_box_gap(design.mechanism)}")
    tracing = trace if noise is not None and token and callable(trace) else None
    if tracing is not None:
        tracing(True)
    try:
        return _run(target, ex, attack, rng, claimed_epsilon, delta, design, alternatives, alpha, cap, batch_pairs,
                    no_model, report, notes, noise, t0, min_detection, probe if noise is None else None)
    finally:
        if tracing is not None:
            tracing(False)


def _run(target: Any, ex: list[tuple[str, str]], attack: Any, rng: np.random.Generator, claimed_epsilon: float,
         delta: float, design: GenerationDesign | None, alternatives: Sequence[str], alpha: float, cap: int,
         batch_pairs: int, no_model: str | None, report: Progress, notes: list[str], noise: NoiseEvidence | None,
         t0: float, min_detection: float, probe: Any = None) -> GenSequentialResult:
    c1, c0 = paired_contexts(ex, attack.canary.exemplar(), int(rng.integers(len(ex))))
    y1 = attack.labels[0]
    p0 = max_pair_accuracy(claimed_epsilon, delta)
    # violation: app.audit.pair_bets (pair accuracy <= p0, "both right" <= p0^2 of the guess "y1: canary
    # in" and of its mirror, and the four single-event inequalities P(E | a) <= e^eps P(E | b) + delta)
    c2 = max_both_right(claimed_epsilon, delta)
    laws = [] if design is None else [alternative_release(design, a, t) for a in alternatives
                                      for t in alternative_ties(a)]
    main = PairBets(claimed_epsilon, p0, c2, design_weights(laws, claimed_epsilon, p0, c2, alpha))
    pr = PairBets(claimed_epsilon, p0, c2) if probe is not None else None  # the one-unit probe's own bets
    w_probe = PROBE_WEIGHT if pr is not None else 0.0
    probing = pr is not None
    alts = [] if design is None else [GenAlternative(a, design) for a in alternatives]
    check = DesignModelCheck(design) if design is not None and alts else None
    min_pairs = check.pairs_needed(alpha) if check is not None else 0
    read = 0  # answers whose noise was read

    def e_black() -> float:
        return (1.0 - w_probe) * main.e + (w_probe * pr.e if pr is not None else 0.0)

    def e_violation() -> float:
        return e_black() if noise is None else 0.5 * e_black() + 0.5 * noise.e_violation

    def e_alts() -> dict[str, float]:  # an alternative the noise does not cover: its black-box e-value
        return {a.name: 0.5 * (a.e + noise.e_alternative(a.name)) if noise is not None and noise.covers(a.name)
                else a.e for a in alts}
    threshold, pass_at = 1.0 / alpha, pass_threshold(alpha, min_detection)
    trials = pairs = 0
    seen = main.seen
    history: list[dict[str, float]] = []
    verdict, reason, decided_by = "inconclusive", "", ""
    refuted_at, stopped_futile = 0, False
    while trials + 2 <= cap:
        if probing and pr is not None:
            try:
                pr.draw_pair(probe, c1, c0, attack, y1, rng)
            except (TargetError, ValueError) as exc:  # the target refuses the one-unit design: the probe stops
                if pr.pairs or isinstance(exc, TargetUnavailableError):  # where it is (a stopped e-process is one)
                    raise
                notes.append(f"the one-unit probe was refused by the target ({type(exc).__name__}); the configured "
                             "design ran alone")
                probing = False
                continue
            trials += 2
            if pr.pairs >= PROBE_MAX_PAIRS or (pr.pairs >= PROBE_MIN_PAIRS and pr.both_right / pr.pairs <= c2):
                probing = False
        for _ in range(0 if probing else min(batch_pairs, (cap - trials) // 2)):
            rel: dict[bool, float] = {}
            for member in ((True, False) if rng.random() < 0.5 else (False, True)):
                obs = target.observe(c1 if member else c0, attack, rng)
                if noise is not None:
                    read += observe_noise(noise, obs)
                rel[member] = float(obs.label == y1)
                for a in alts:
                    a.update(rel[member], member)
                if check is not None:
                    check.update(rel[member], member, threshold)
            trials += 2
            pairs += 1
            main.update(rel)
        ev, ea = e_violation(), e_alts()
        history.append({"trials": trials, "e_violation": ev, **{f"e_{n}": v for n, v in ea.items()}})
        report(min(0.99, trials / cap), f"sequential: {trials} trials, e-value {ev:.3g} (violation at {threshold:g})")
        if ev >= threshold:
            verdict = "violation"
            white = noise is not None and noise.e_violation > e_black()
            decided_by = "white-box" if white else "black-box"
            by_probe = pr is not None and w_probe * pr.e > (1.0 - w_probe) * main.e
            why = (f"white-box: {noise_finding(noise)}" if noise is not None and white else
                   f"the one-unit probe: {pr.why(delta)}" if by_probe and pr is not None else main.why(delta))
            reason = (f"the e-value against the claim epsilon {claimed_epsilon:g} reached {ev:.4g} >= 1/alpha = "
                      f"{threshold:g} after {trials} trials (anytime-valid at level {alpha:g}; {why})")
            break
        if check is not None and check.refuted and noise is None:
            # no black-box pass can follow a refuted design model: go on for a violation only while its
            # e-value says one may come (>= 1), once the audit has drawn as many pairs again as when it was
            # refuted and at least min_pairs more; any stopping time keeps the violation test's level (Ville)
            # (or while the observed shares exceed one of the DP inequalities or lie within FUTILITY_Z standard errors
            # of it: a rare release's bet grows slowly, app.audit.pair_bets)
            refuted_at = refuted_at or pairs
            if pairs >= refuted_at + max(refuted_at, min_pairs) and ev < 1.0 and not main.may_exceed_ratio(delta):
                stopped_futile = True
                break
        if not (alts and all(v >= pass_at for v in ea.values())):
            continue
        halves = {"white-box" if noise is not None and noise.covers(a.name) and noise.e_alternative(a.name) >= a.e
                  else "black-box" for a in alts}
        # a black-box half needs the check to have had its pairs, never refuted, and the shares now within
        # Z_BLOCK standard errors of the claimed law's (a blocker only: it can delay or withhold a pass)
        if "black-box" in halves and check is not None and not check.allows_pass(seen[True], seen[False], pairs,
                                                                                min_pairs):
            continue
        verdict = "pass"
        decided_by = " and ".join(sorted(halves, reverse=True))
        reason = (f"no violation (e-value {ev:.3g} < 1/alpha = {threshold:g}) and every required alternative "
                  f"rejected (e-value >= 1/(1 - min_detection) = {pass_at:g}: a target that is one passes with "
                  f"probability <= {1.0 - min_detection:g}, the planner's miss rate) after {trials} trials: "
                  + ", ".join(f"{n} e={v:.3g}" for n, v in ea.items())
                  + (" (release laws of gen_power's design model, the auditor's best case)"
                     if "black-box" in halves else "")
                  + (" (white-box: the likelihood of the reported noise, or released tokens, under the claimed "
                     "scale over the alternatives')" if "white-box" in halves else ""))
        break
    ea = e_alts()
    if verdict == "inconclusive":
        open_ = [n for n in alternatives if ea.get(n, 0.0) < pass_at]
        reason = ((f"stopped after {trials} trials, no pass possible: the design model was refuted after "
                   f"{refuted_at} pairs and the e-value against the claim stayed below 1 ({e_violation():.3g}) "
                   f"for {pairs - refuted_at} more, so no violation was coming either; " if stopped_futile else
                   f"cap of {cap} trials reached: ")
                  + f"e-value against the claim {e_violation():.3g} < {threshold:g}, and "
                  + (", ".join(f"{n} e={ea.get(n, 0.0):.3g}" for n in open_) or "no alternative")
                  + f" not rejected (at {pass_at:g}): not a pass" + ("" if design is not None or not no_model else f" ({no_model})"))
    over = main.exceeded(delta) if verdict == "inconclusive" else None
    if over is not None:  # point estimates: what a larger cap may turn into evidence (app.audit.pair_bets)
        notes.append(f"not evidence yet: {over}; where such a release is rare on both contexts its bet grows "
                     "slowly (thousands of answers), so a larger trials cap may reach a violation")
    if check is not None and check.refuted:
        notes.append(f"design model refuted: the shares of y1 with / without the canary ({seen[True] / max(1, pairs):.2f} / "
                     f"{seen[False] / max(1, pairs):.2f}) are not the claimed law's ({check.law[0]:.2f} / "
                     f"{check.law[1]:.2f}; e-value {check.e:.3g} >= {threshold:g}): the alternatives' laws do not "
                     "describe this target, so no black-box pass (white-box evidence, where the target reports "
                     "its noise, can still pass)")
    elif check is not None and verdict == "inconclusive" and pairs < min_pairs:
        notes.append(f"a black-box pass waits for {min_pairs} pairs, what a test of the claimed law needs to see a "
                     f"shift of {MODEL_CHECK_DELTA:g} in a share of y1 at level {alpha:g}")
    untested = [a for a in GEN_ALTERNATIVES if a != "claimed" and a not in alternatives]
    if verdict == "pass" and untested:  # what a pass does not show
        notes.append(f"a pass rules out the required alternatives only: {', '.join(untested)} were not tested (add "
                     "them to power.alternatives)")
    if noise is not None and not read:
        notes.append("white-box: the target reported no clean and noisy statistic (internals missing): black-box only")
    if noise is not None and noise.impossible:
        notes.append("white-box: " + "; ".join(noise.impossible))
    arms: dict[str, dict[str, Any]] = {}
    if pr is not None:
        notes.append(f"a one-unit probe drew {2 * pr.pairs} trials first (the canary decides its release), weight "
                     f"{w_probe:g} in the black-box violation e-value")
        arms = {"probe": {"units": 1, "trials": 2 * pr.pairs, "pairs": pr.pairs, "e_violation": pr.e,
                          "both_right_rate": pr.both_right / max(1, pr.pairs)},
                "design": {"trials": 2 * pairs, "pairs": pairs, "e_violation": main.e}}
    report(1.0, "sequential audit done")
    half = max(1, pairs)
    comps = {**main.components(),
             **({"design_model_check": check.e} if check is not None else {}),
             **({"noise": noise.e_violation} if noise is not None else {})}
    wb: dict[str, Any] = {} if noise is None else {
        "noise": noise.kind, ("sigma" if noise.kind == "gaussian" else "temperature"): float(noise.scale),
        "answers_read": read, "e_violation": noise.e_violation,
        "e_alternatives": {n: noise.e_alternative(n) for n in noise.log_alt}, "impossible": list(noise.impossible)}
    return GenSequentialResult(
        verdict, reason, trials, pairs, alpha, e_violation(), comps, ea,
        "assumed" if design is not None else "none", cap, p0, main.correct / half, time.perf_counter() - t0,
        prompts=trials, pass_level=1.0 - min_detection, arms=arms, history=history[-200:], notes=notes,
        design=None if design is None else design_summary(design),
        laws={a.name: {t: list(v) for t, v in a.law.items()} for a in alts},
        y1_with=seen[True] / half, y1_without=seen[False] / half, decided_by=decided_by, white_box=wb)


class DesignModelTarget:
    """A generation release that follows gen_power's design model exactly (simulations, benchmarks):
    y1 with probability ``alternative_release(design, alternative, ties)`` for the trial's hypothesis
    (the canary in the context or not). ``alternative`` "claimed" is the correct mechanism; a number
    is a multiplier of the noise scale (``GenerationDesign.release``)."""

    white_box = False
    task = "generation"

    def __init__(self, design: GenerationDesign, alternative: str | float = "claimed", ties: str = "positive") -> None:
        self.p_in, self.p_out = (alternative_release(design, alternative, ties) if isinstance(alternative, str)
                                 else design.release(float(alternative), ties))
        self.name = f"design-model:{design.mechanism}:{alternative}"
        self.calls = 0

    def observe(self, context: Sequence[tuple[str, str]], attack: Any, rng: np.random.Generator) -> Any:
        from app.audit.targets import Observation

        self.calls += 1
        p = self.p_in if tuple(attack.canary.exemplar()) in [tuple(c) for c in context] else self.p_out
        return Observation(attack.labels[0] if rng.random() < p else attack.labels[1])


__all__ = ["ASSUMED_NOTE", "DesignModelTarget", "GenAlternative", "GenSequentialResult", "run_gen_sequential"]
