"""The power of a ``ksa`` generation audit: the exact release law of keyword-space aggregation.

``ksa`` (Wu et al. 2024, DP-ICL keyword space aggregation, as ``app.mechanisms.ksa`` implements it)
releases no per-token distribution: T partitions answer, a keyword histogram of the answers picks
k* by the exponential mechanism on the count gaps, propose-test-release (PTR) on the gap at k*
releases the k* most used keywords or nothing, and a zero-shot prompt (no exemplar) generates with
the released keywords as suggestions. Under the same best-case design model as ``app.audit.gen_power``
(the canary's partition answers y1, every other y0; without the canary all answer y0) the two
keyword histograms are fixed, so the release step's law is exact, computed with the mechanism's
own functions (``keyword_histogram``, ``count_gaps``, ``top_keywords``, ``pass_probability``, the
exponential mechanism's law ``aggregate.exponential_mechanism_distribution`` that ``select_k``
samples by Gumbel-max) -- no re-implemented noise:

    P(y1) = sum_k P(k* = k) [ P(pass | gap_k) a(top_k) + (1 - P(pass | gap_k)) / 2 ]

with a(words) the final step's answer (design model): 1 if a keyword of y1 that y0 lacks is
suggested, else 0 if a keyword of y0 that y1 lacks is, else 1/2 -- as with nothing released, where
the zero-shot prompt has no examples and the signal query (tight-auditing App. Prompt 3) says
"randomly output either y1 or y0". ``tests/audit/test_gen_power_ksa.py`` checks the law against
the mechanism's own ``release_keywords`` (its Gumbel and Gaussian draws) and its ``run`` end to end.

Alternatives: noise x f (``noise_half`` ... ``noise_tenth``) is the mechanism run with its noise
parameters scaled -- epsilon_EM / f (Gumbel scale x f) and the PTR noise multiplier x f, so its own
threshold offset Phi^-1(1 - delta0) D sigma scales too (a mis-calibrated sigma); ``no_noise``: k* the
argmax of the gaps (a tie broken to the lowest or highest k, the worse taken) and the test passes
iff gap > D (``ptr_test`` at noise 0); ``non_private`` as for every mechanism (the full-context
release: y1 iff the canary is there). A unit reads the canary with probability
q = T x shots / n (``gen_power._coverage``).

What it shows: one canary moves every keyword count by at most 1, so the gap at y0's keyword count
moves from T to T - 2 (= D, the gap's sensitivity) and the canary is visible through PTR's pass
probability and the exponential mechanism's choice of k* -- the noise the claim is about. A y1
keyword itself is released only through an unstable set passing the test (probability <= delta0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from app.audit.gen_power import GEN_ALTERNATIVES, GenerationDesign

KSA_MODEL_NOTE = (
    "design model (not observed): the canary's partition answers y1 and every other y0; the final zero-shot "
    "answer is y1 when a keyword only y1 has is suggested, y0 when one only y0 has is, and y1 or y0 at random "
    "otherwise (nothing released: the signal query's zero-shot rule); a model that does not follow the signal "
    "query or the suggestions lowers the real power")


def scaled_config(cfg: Any, multiplier: float) -> Any:
    """The ksa configuration with its noise at ``multiplier`` x the claimed scale: epsilon_EM /
    multiplier (Gumbel scale x multiplier) and the PTR noise multiplier x multiplier."""
    if not multiplier > 0:
        raise ValueError("a noise multiplier > 0 (no_noise is the deterministic release)")
    b = cfg.budget
    return replace(cfg, budget=replace(b, epsilon_em=b.epsilon_em / multiplier,
                                       noise_multiplier=b.noise_multiplier * multiplier))


def answer_y1(words: Sequence[str] | None, y1_only: frozenset[str], y0_only: frozenset[str]) -> float:
    """P(the final zero-shot answer is y1) given the released keywords (design model)."""
    w = set(words or ())
    if w & y1_only:
        return 1.0
    if w & y0_only:
        return 0.0
    return 0.5


def release_y1(cfg: Any, answers: Sequence[str], multiplier: float, y1_only: frozenset[str],
               y0_only: frozenset[str], ties: str = "positive") -> float:
    """Exact P(y1) of one ksa answer whose partitions answered ``answers``, with the noise at
    ``multiplier`` x the claimed scale (0: deterministic; ``ties`` "positive" breaks an argmax tie
    of the gaps to the lowest k, else the highest)."""
    from app.mechanisms import aggregate as agg
    from app.mechanisms import ksa

    hist = ksa.keyword_histogram(answers)
    gaps = ksa.count_gaps(hist, cfg.max_keywords)
    d = float(cfg.gap_sensitivity)
    if multiplier == 0.0:
        best = np.flatnonzero(gaps == gaps.max())
        k = int(best[0] if ties == "positive" else best[-1]) + 1
        # ptr_test at noise 0 draws N(0, 0) = 0: passes iff gap > D (the generator is never used)
        passed, _ = ksa.ptr_test(float(gaps[k - 1]), d, 0.0, cfg.budget.delta0, np.random.default_rng(0))
        return answer_y1(ksa.top_keywords(hist, k) if passed else None, y1_only, y0_only)
    c = scaled_config(cfg, multiplier)
    probs = agg.exponential_mechanism_distribution(gaps, c.budget.epsilon_em / (2.0 * d))  # select_k's law
    total = 0.0
    for i in np.flatnonzero(probs > 0.0):
        p_pass = ksa.pass_probability(float(gaps[i]), d, c.budget.noise_multiplier, c.budget.delta0)
        total += float(probs[i]) * (p_pass * answer_y1(ksa.top_keywords(hist, int(i) + 1), y1_only, y0_only)
                                    + (1.0 - p_pass) * 0.5)
    return float(min(1.0, max(0.0, total)))


@dataclass(frozen=True)
class KSADesign(GenerationDesign):
    """ksa's design: ``release`` is the exact law above (precomputed for the named alternatives)."""

    config: Any = None  # the mechanism's own KSAConfig (``ksa.configure``)
    signals: tuple[str, str] = ("", "")
    table: tuple[tuple[float, str, float, float], ...] = ()  # (multiplier, ties, P(y1|read), P(y1|out))

    @property
    def model_note(self) -> str:
        return KSA_MODEL_NOTE

    def answers(self) -> tuple[list[str], list[str]]:
        """The partitions' answers with the canary read (one y1) and without (all y0)."""
        y1, y0 = self.signals
        return [y1] + [y0] * (self.units - 1), [y0] * self.units

    def keyword_sides(self) -> tuple[frozenset[str], frozenset[str]]:
        from app.mechanisms import ksa

        k1, k0 = ksa.keywords(self.signals[0]), ksa.keywords(self.signals[1])
        return frozenset(k1 - k0), frozenset(k0 - k1)

    def unit_release(self, multiplier: float, ties: str = "positive") -> tuple[float, float]:
        """(P(y1 | the canary read), P(y1 | no canary)) before the coverage mixture."""
        t = ties if multiplier == 0.0 else "positive"
        for m, tt, p_in, p_out in self.table:
            if m == multiplier and tt == t:
                return p_in, p_out
        with_, without = self.answers()
        y1o, y0o = self.keyword_sides()
        return (release_y1(self.config, with_, multiplier, y1o, y0o, t),
                release_y1(self.config, without, multiplier, y1o, y0o, t))

    def release(self, multiplier: float | None, ties: str = "positive") -> tuple[float, float]:
        if multiplier is None:
            return 1.0, 0.0
        p_in, p_out = self.unit_release(multiplier, ties)
        return self.coverage * p_in + (1.0 - self.coverage) * p_out, p_out


def ksa_design(cfg: Any, n_exemplars: int, signals: Sequence[str] | None) -> KSADesign:
    """The design of a ksa configuration (``ksa.configure``) for ``n_exemplars`` and the signal
    texts (y1, y0): its release law for every alternative, computed once."""
    from app.audit.gen_power import NoPowerModel, _coverage

    if signals is None or len(signals) != 2 or signals[0] == signals[1]:
        raise NoPowerModel("ksa's design model needs the two signal texts (y1, y0)")
    t = int(cfg.partitions)
    base = KSADesign("ksa", t, float(cfg.gap_sensitivity * cfg.budget.noise_multiplier), 0.0, 0.0, "ksa",
                     coverage=_coverage(t * int(cfg.shots_per_partition), n_exemplars), config=cfg,
                     signals=(str(signals[0]), str(signals[1])))
    rows = []
    for mult in GEN_ALTERNATIVES.values():
        if mult is None:
            continue
        for ties in (("positive", "other") if mult == 0.0 else ("positive",)):
            rows.append((float(mult), ties, *base.unit_release(float(mult), ties)))
    return replace(base, table=tuple(rows))
