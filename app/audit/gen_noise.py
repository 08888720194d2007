"""White-box noise evidence of sequential generation audits (``app.audit.gen_sequential``).

Where a generation target reports the clean statistic and the noisy one it released from, the
noise itself is observed, and ``app.audit.eprocess.NoiseEvidence`` (the classification audit's
white-box e-processes, one copy of the logic) turns it into e-values: likelihood ratios are
e-values, and products of them over answers test martingales under the law in the numerator's
denominator (González, Dulce-Rubio, Ramdas & Ribero, "Sequentially Auditing Differential
Privacy", NeurIPS 2025, Section 3: e-values, test supermartingales, Ville's inequality).

* ``esa`` (tight-auditing Algorithm 3 lines 7-9, ``app.mechanisms.esa.aggregate``): the internals
  carry ``clean_mean`` (the mean of the clipped member embeddings) and ``noisy_mean``; for a
  correct esa, noisy - clean ~ N(0, sigma^2 I): every coordinate (384 for MiniLM) an i.i.d. draw
  of N(0, sigma^2), sigma the claim's calibration (``GenerationDesign.scale``: esa's own
  ``configure``). Alternative a of ``gen_power.GEN_ALTERNATIVES`` draws N(0, (f sigma)^2 I), f its
  multiplier; ``no_noise`` and ``non_private`` add none (noisy == clean). So (a) against the
  claim: the mixture of likelihood ratios prod N(r; 0, (f sigma)^2) / N(r; 0, sigma^2), f = 1/2,
  1/4, 1/10, and an exact zero residual (probability 0 under a continuous noise); (b) against
  alternative a: prod N(r; 0, sigma^2) / N(r; 0, (f sigma)^2) (a martingale under a, and a
  supermartingale under any smaller scale: the Gaussian scale family's likelihood ratio is
  monotone), or a nonzero residual where a adds none. Algorithm 3 line 11 releases the zero-shot
  candidate nearest the noisy mean: a released text that is not (``GenerationObservation.nearest``,
  in the auditor's embedding beyond float tolerance) has probability 0 under the claim too.
* not covered (``WHITE_BOX_GAPS``: black-box only, said in the verdict's notes): the token
  mechanisms and ksa, see there.

The noise evidence tests the claimed *mechanism* (its noise at the calibrated scale), as the
classification audit's white-box half does; the black-box half tests the claimed (epsilon, delta)
for any mechanism. The violation e-value averages them (weights 1/2), each alternative's e-value
averages its two halves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.audit.eprocess import NoiseEvidence
from app.audit.gen_power import GEN_ALTERNATIVES, GenerationDesign, alternative_release
from app.audit.noise import VotingNoise

COVERED = ("esa",)
_TOKEN_GAP = ("per step its internals carry the released token, its log-probability under the mechanism's own "
              "sampling law and the largest probability, not the clean score vector nor the Gumbel draw, so the "
              "likelihood of a step under a rescaled temperature cannot be computed (the scores would add "
              "private-derived data to internals, which the white-box report does not carry)")
WHITE_BOX_GAPS: dict[str, str] = {
    "clip_softmax": _TOKEN_GAP,
    "poe": _TOKEN_GAP,
    "mozo": _TOKEN_GAP,
    "ksa": ("its internals carry the gap scores with their Gumbel-noised copy and the PTR statistic, but its "
            "alternatives rescale two noises at once (the exponential mechanism's Gumbel and PTR's Gaussian with "
            "its threshold offset) and the released text is a greedy generation from the keywords: not modelled "
            "white-box yet"),
}
NOT_NEAREST = ("a released text is not the zero-shot candidate nearest the reported noisy mean (esa releases the "
               "nearest: tight-auditing Algorithm 3 line 11)")


def white_box_gap(mechanism: str) -> str | None:
    """Why a white-box sequential audit of ``mechanism`` reads no noise (None: it does)."""
    if mechanism in COVERED:
        return None
    return WHITE_BOX_GAPS.get(mechanism, f"{mechanism} reports no noisy statistic")


def white_box_evidence(design: GenerationDesign | None, alternatives: Sequence[str], claimed_epsilon: float,
                       delta: float) -> NoiseEvidence | None:
    """NoiseEvidence over the claimed noise of ``design`` (esa: N(0, sigma^2) per coordinate) and each
    alternative's (its multiplier of gen_power.GEN_ALTERNATIVES; non_private: no noise), or None where
    the design's mechanism is not covered."""
    if design is None or design.mechanism not in COVERED:
        return None
    claimed = VotingNoise("gaussian", float(design.scale), float(claimed_epsilon), float(delta))
    alts = {}
    for name in alternatives:
        f = GEN_ALTERNATIVES[name]
        alts[name] = VotingNoise("gaussian", float(design.scale), float(claimed_epsilon), float(delta),
                                 noise_multiplier=0.0 if f is None else float(f))
    return NoiseEvidence(claimed, alts)


def observe_noise(ev: NoiseEvidence, obs: Any) -> bool:
    """Feed one answer's reported vectors to ``ev``; True where the answer carried them."""
    clean, noisy = getattr(obs, "clean_vector", None), getattr(obs, "noisy_vector", None)
    if clean is None or noisy is None:
        return False
    ev.update(np.asarray(clean, dtype=float).ravel(), np.asarray(noisy, dtype=float).ravel(), None)
    if getattr(obs, "nearest", None) is False:
        ev.flag(NOT_NEAREST)
    return True


def noise_finding(ev: NoiseEvidence) -> str:
    """What the noise evidence against the claim found, for a verdict's reason."""
    if ev.impossible:
        return "; ".join(ev.impossible)
    return (f"the reported noise is smaller than the claimed sigma {ev.scale:.4g} (mixture of likelihood ratios of "
            f"the noise at sigma x 1/2, 1/4, 1/10 over the claimed: {ev.e_violation:.3g})")


def _signal_pair(distance: float, dims: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors e1, e0 at distance ``distance`` in ``dims`` dimensions."""
    e0, e1 = np.zeros(dims), np.zeros(dims)
    e0[0] = 1.0
    e1[0], e1[1] = 1.0 - distance ** 2 / 2.0, distance * np.sqrt(1.0 - distance ** 2 / 4.0)
    return e1, e0


@dataclass
class ESAWhiteBoxTarget:
    """A white-box esa release in gen_power's design model (simulations, benchmarks), with the
    mechanism's own noise and selection code: T units answer e0 (the y0 text's embedding), the
    canary's unit e1 when the canary is read (probability ``coverage``); members clipped, averaged
    and noised by ``esa.aggregate`` at f x sigma (f: the alternative's multiplier); the release is
    the candidate of {y1, y0} nearest the noisy mean (``esa.select_candidate``; ``ties``: which
    wins an exact tie). Reports ``clean_vector`` and ``noisy_vector`` as a white-box gateway does.
    ``non_private`` is the full-context release: y1 iff the canary is there, and no internals
    (``full_context`` reports none). Its black-box law is ``alternative_release`` (tested)."""

    design: GenerationDesign
    alternative: str | float = "claimed"
    ties: str = "positive"
    dims: int = 384  # MiniLM's embedding dimension
    white_box: bool = True
    task: str = "generation"

    def __post_init__(self) -> None:
        d = self.design
        if d.mechanism != "esa" or not d.signal_distance:
            raise ValueError("an esa design with its signal distance")
        self.f = GEN_ALTERNATIVES[self.alternative] if isinstance(self.alternative, str) else float(self.alternative)
        self.r = -2.0 * d.gap_without / d.signal_distance  # min(1, clip norm): gap_without = -r D / 2
        self.e1, self.e0 = _signal_pair(float(d.signal_distance), self.dims)
        self.name = f"esa-white-box:{self.alternative}"
        self.calls = 0
        # the black-box law it follows by construction (checked in the tests)
        self.law = alternative_release(d, self.alternative, self.ties) if isinstance(self.alternative, str) else None

    def observe(self, context: Sequence[tuple[str, str]], attack: Any, rng: np.random.Generator) -> Any:
        from app.audit.gen_targets import GenerationObservation
        from app.mechanisms import esa

        self.calls += 1
        y1, y0 = attack.labels[0], attack.labels[1]
        member = tuple(attack.canary.exemplar()) in [tuple(c) for c in context]
        read = member and rng.random() < self.design.coverage
        if self.f is None:  # non_private: the full-context release
            return GenerationObservation(y1 if member else y0, None, None, text=y1 if member else y0)
        units = np.tile(self.r * self.e0, (self.design.units, 1))
        if read:
            units[0] = self.r * self.e1
        clean, noisy = esa.aggregate(units, self.r, float(self.f) * self.design.scale, rng)
        cands = [self.e1, self.e0] if self.ties == "positive" else [self.e0, self.e1]
        idx, _ = esa.select_candidate(noisy, np.vstack(cands))
        label = (y1 if idx == 0 else y0) if self.ties == "positive" else (y0 if idx == 0 else y1)
        return GenerationObservation(label, None, None, text=label, noisy_vector=noisy, clean_vector=clean,
                                     nearest=True)


__all__ = ["COVERED", "ESAWhiteBoxTarget", "NOT_NEAREST", "WHITE_BOX_GAPS", "noise_finding", "observe_noise",
           "white_box_evidence", "white_box_gap"]
