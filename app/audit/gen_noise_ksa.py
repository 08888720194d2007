"""White-box evidence of ``ksa`` in sequential generation audits (``app.audit.gen_noise``).

``ksa`` (Wu et al. 2024, DP-ICL keyword space aggregation; ``app.mechanisms.ksa.release_keywords``)
releases through two noises: the exponential mechanism picks k* = argmax(lam d_k + Gumbel(1)),
lam = eps_EM / (2D), over the keyword count gaps d (so k* ~ softmax(lam d)), and propose-test-release
passes iff max(D, d_k*) + N(0, (D sigma)^2) - Phi^-1(1 - delta0) D sigma > D, i.e. with probability
``ksa.pass_probability(d_k*, D, sigma, delta0)``. Its internals carry the clean gaps ``gaps``, the
chosen ``k`` and ``ptr_passed`` (in process, and through a gateway's 'internals' scope). With the
gaps trusted (as the token mechanisms' clean statistic is), one answer's likelihood under noise x f
is P_f(k*, pass) = softmax(lam d / f)(k*) x P(pass | d_k*, sigma f)^pass (1 - ...)^(1 - pass):
gen_power_ksa's alternative exactly (``scaled_config``: eps_EM / f and the PTR noise multiplier x f,
its threshold offset scaling with it), so the claim, each alternative and the design model agree.

Per answer, through ``NoiseEvidence.add_log_ratios``: (a) against the claim, log P_f - log P_1 for
f = 1/2, 1/4, 1/10 (each factor has conditional mean 1 under the claim: the EM factor given the past,
the PTR factor given the past and k*, its Gaussian being fresh); (b) against noise x f, log P_1 -
log P_f: a supermartingale under any scale f' <= f too (the EM factor: the softmax temperature family
is monotone in the score, as for the token mechanisms; the PTR factor: a Bernoulli whose pass
probability only grows as the scale shrinks, p_1 <= p_f <= p_f', so E_f'[P_1 / P_f] <= 1), and the
product of the two by the tower rule; (c) against ``no_noise`` (k* an argmax of d, either tie-break;
the test passes iff d_k* > D): a release that is not that has probability 0 there (INF_LOG), one
that is leaves the e-value at 1. ``non_private`` (the full-context release) reports no ksa internals:
black-box only. The final zero-shot generation from the released keywords adds no noise: nothing to
read there. What is assumed: the reported gaps are the ones ksa computed (trusted); the keywords
released are top-k* of the histogram (not re-checked here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import log_ndtr, ndtri

from app.audit.eprocess import INF_LOG, SCALE_DOWN, NoiseEvidence
from app.audit.noise import VotingNoise


class KSAEvidence(NoiseEvidence):
    """NoiseEvidence over ksa's release (module doc): ``config`` is the claim's ``KSAConfig``; the
    claimed noise's ``scale`` is the exponential mechanism's temperature 2D / eps_EM."""

    def __init__(self, config: Any, claimed: VotingNoise, alternatives: Mapping[str, VotingNoise | None]) -> None:
        super().__init__(claimed, alternatives)
        self.config = config
        self.z = -float(ndtri(float(config.budget.delta0)))  # Phi^-1(1 - delta0), PTR's threshold offset / scale


def ksa_evidence(design: Any, alternatives: Sequence[str], claimed_epsilon: float, delta: float) -> KSAEvidence:
    """The evidence for a ksa design (``gen_power_ksa.KSADesign``: its ``config``), every alternative
    of ``alternatives`` covered but ``non_private``."""
    from app.audit.gen_power import GEN_ALTERNATIVES

    cfg = design.config
    temp = 2.0 * float(cfg.gap_sensitivity) / float(cfg.budget.epsilon_em)
    claimed = VotingNoise("gumbel", temp, float(claimed_epsilon), float(delta))
    alts: dict[str, VotingNoise | None] = {}
    for name in alternatives:
        f = GEN_ALTERNATIVES[name]
        alts[name] = None if f is None else VotingNoise("gumbel", temp, float(claimed_epsilon), float(delta),
                                                        noise_multiplier=float(f))
    return KSAEvidence(cfg, claimed, alts)


def release_of(internals: Mapping[str, Any] | None) -> tuple[np.ndarray, int, bool] | None:
    """(gaps, k*, passed) from ksa's internals (None where they are missing or malformed)."""
    if not internals:
        return None
    try:
        gaps = np.asarray(internals["gaps"], dtype=float).ravel()
        k, passed = int(internals["k"]), internals["ptr_passed"]
    except (KeyError, TypeError, ValueError):
        return None
    if not isinstance(passed, bool) or not 1 <= k <= gaps.size or not np.all(np.isfinite(gaps)):
        return None
    return gaps, k, passed


def _log_p(ev: KSAEvidence, gaps: np.ndarray, k: int, passed: bool, f: float) -> float:
    """log P_f(k*, pass) (module doc), f > 0."""
    cfg = ev.config
    d = float(cfg.gap_sensitivity)
    a = (gaps / ev.scale) / f  # lam d / f
    top = float(np.max(a))
    log_em = float(a[k - 1] - top - np.log(np.sum(np.exp(a - top))))
    scale = d * float(cfg.budget.noise_multiplier) * f
    x = (d - max(d, float(gaps[k - 1]))) / scale + ev.z
    log_ptr = float(log_ndtr(-x) if passed else log_ndtr(x))  # ksa.pass_probability = Phi(-x)
    return log_em + log_ptr


def observe_ksa(ev: KSAEvidence, gaps: np.ndarray, k: int, passed: bool) -> None:
    """One ksa answer's log likelihood ratios (module doc)."""
    base = _log_p(ev, gaps, k, passed, 1.0)
    down = [_log_p(ev, gaps, k, passed, f) - base for f in SCALE_DOWN]
    alts: dict[str, float] = {}
    d = float(ev.config.gap_sensitivity)
    for name, alt in ev.alternatives.items():
        if alt is None or float(alt.noise_multiplier) == 1.0:
            continue
        m = float(alt.noise_multiplier)
        if m == 0.0:  # k* an argmax (either tie-break), and the test passes iff the gap > D (noise 0)
            argmax = gaps[k - 1] >= float(np.max(gaps))
            alts[name] = 0.0 if argmax and passed == (float(gaps[k - 1]) > d) else INF_LOG
        else:
            alts[name] = base - _log_p(ev, gaps, k, passed, m)
    ev.add_log_ratios(down, alts)


@dataclass
class KSAWhiteBoxTarget:
    """A white-box ksa release in gen_power_ksa's design model (simulations, benchmarks, tests), with the
    mechanism's own release step (``ksa.release_keywords``'s parts: histogram and gaps, computed once
    per hypothesis, ``select_k``'s Gumbel-max k*, ``ptr_test``, ``top_keywords``): the
    partitions answer ``design.answers()`` (the canary's partition y1 when the canary is read,
    probability ``coverage``), the release is y1 when a keyword only y1 has is suggested, y0 when one
    only y0 has is, else a fair coin (the design model's zero-shot rule; ``gen_power_ksa.answer_y1``),
    so y1 follows ``alternative_release`` exactly. Reports the internals' (gaps, k*, passed). "noise x f":
    ``gen_power_ksa.scaled_config`` (both noises x f); ``no_noise``: k* the argmax of the gaps (a tie to
    the lowest k, ``ties`` "positive", else the highest), passing iff the gap > D; ``non_private``:
    y1 iff the canary is in the context, no internals."""

    design: Any
    alternative: str | float = "claimed"
    ties: str = "positive"
    task: str = "generation"

    def __post_init__(self) -> None:
        from app.audit.gen_power import GEN_ALTERNATIVES, alternative_release
        from app.audit.gen_power_ksa import scaled_config

        d = self.design
        if d.mechanism != "ksa" or getattr(d, "config", None) is None:
            raise ValueError("a ksa design (gen_power_ksa.KSADesign)")
        self.f = GEN_ALTERNATIVES[self.alternative] if isinstance(self.alternative, str) else float(self.alternative)
        self.cfg = scaled_config(d.config, float(self.f)) if self.f else d.config
        self.sides = d.keyword_sides()
        from app.mechanisms import ksa

        self.hists = {}  # canary read or not -> the keyword histogram of the partitions' answers and its gaps
        for read, answers in zip((True, False), d.answers()):
            hist = ksa.keyword_histogram(answers)
            self.hists[read] = (hist, np.asarray(ksa.count_gaps(hist, self.cfg.max_keywords), dtype=float))
        self.name = f"ksa-white-box:{self.alternative}"
        self.calls = 0
        self.law = alternative_release(d, self.alternative, self.ties) if isinstance(self.alternative, str) else None

    def observe(self, context: Sequence[tuple[str, str]], attack: Any, rng: np.random.Generator) -> Any:
        from app.audit.gen_power_ksa import answer_y1
        from app.audit.gen_targets import GenerationObservation
        from app.mechanisms import ksa

        self.calls += 1
        y1, y0 = attack.labels[0], attack.labels[1]
        member = tuple(attack.canary.exemplar()) in [tuple(c) for c in context]
        if self.f is None:  # non_private: the full-context release, no ksa internals
            return GenerationObservation(y1 if member else y0, None, None, text=y1 if member else y0)
        hist, gaps = self.hists[bool(member and rng.random() < self.design.coverage)]
        c, dd = self.cfg, float(self.cfg.gap_sensitivity)
        if self.f == 0.0:
            best = np.flatnonzero(gaps == gaps.max())
            k = int(best[0] if self.ties == "positive" else best[-1]) + 1
            passed = bool(gaps[k - 1] > dd)
        else:  # ksa.release_keywords' noise, on the (fixed) histogram of the design's answers
            k, _ = ksa.select_k(gaps, c.budget.epsilon_em, dd, rng)
            passed, _ = ksa.ptr_test(float(gaps[k - 1]), dd, c.budget.noise_multiplier, c.budget.delta0, rng)
        a = answer_y1(ksa.top_keywords(hist, k) if passed else None, *self.sides)
        label = y1 if a == 1.0 or (a == 0.5 and rng.random() < 0.5) else y0
        return GenerationObservation(label, None, None, text=label, ksa_release=(gaps, k, passed))


__all__ = ["KSAEvidence", "KSAWhiteBoxTarget", "ksa_evidence", "observe_ksa", "release_of"]
