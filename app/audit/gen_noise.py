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
* ``clip_softmax`` (ICLInf App. C, Algorithm 1), ``poe`` decoding (PoEtry Eq. 3 + exponential
  mechanism) and ``mozo`` (DPS-MOZO / PMixED: q ~ prod_i p~_i^(1/(E tau))), in this process only:
  every private step releases x_t = argmax(a_t + Gumbel), i.e. x_t ~ softmax(a_t),
  a_t = statistic_t / temperature (the mean clipped logits l(Z) over tau; the summed clipped
  log-probabilities U times lam; mozo: the mean mixed log-probability (1/E) sum_i log p~_i, padding
  experts included, over tau), -inf outside the public candidate set. The mechanism's chooser hands
  (statistic_t, x_t) to ``app.mechanisms.step_trace``'s collector, which ``GenerationMechanismTarget``
  sets around its own call (never in the internals or any response). The claim's scores are
  statistic_t / tau_claim (``GenerationDesign.scale``: tau, or 1/lam, of the mechanism's own
  ``configure``), so P_1(x) = softmax(a_t)(x); alternative "noise x f" samples from
  softmax(a_t / f), ``no_noise`` is the argmax (either tie-break). Per step: (a) against the claim
  the factors P_f(x_t) / P_1(x_t), f = 1/2, 1/4, 1/10 (each conditional mean 1 given the past under
  the claim: a test martingale per f, their mean one too), and a released token of claimed
  probability 0 (outside the candidates): a violation; (b) against "noise x f": P_1(x_t) / P_f(x_t);
  against ``no_noise``: a released token that is not an argmax of a_t (probability 0 under either
  tie-break; an argmax leaves it at 1). ``non_private`` (the full-context model) is no function of
  a_t: black-box only. What is assumed: the target's clean statistic is its own (trusted, as the
  classification white-box trusts the clean votes); the evidence tests the sampling step. For mozo
  the statistic carries the data-dependent part (lam, the mixing with the public base, per expert by
  default): a white-box test of the sampling temperature says nothing about it (mozo run at 100x its
  epsilon samples at the same tau with a larger lam: only the black-box half, and the design-model
  check it needs for a pass, can see that). A remote target's internals carry no statistic:
  black-box (``REMOTE_TOKEN_GAP``).
* ``ksa`` (keyword space aggregation: the exponential mechanism's k* over the count gaps, then
  propose-test-release): ``app.audit.gen_noise_ksa``. Its internals carry the clean gaps, k* and the
  test's outcome (in process, and through a gateway's 'internals' scope); the likelihood of (k*, pass)
  under the claim and under each alternative (both noises x f, as gen_power_ksa's alternatives) is
  exact. ``non_private`` is black-box only.
* not covered (``WHITE_BOX_GAPS``: black-box only, said in the verdict's notes): none at present.

The noise evidence tests the claimed *mechanism* (its noise at the calibrated scale), as the
classification audit's white-box half does; the black-box half tests the claimed (epsilon, delta)
for any mechanism. The violation e-value averages them (weights 1/2), each alternative's e-value
averages its two halves (an alternative the noise says nothing about: its black-box e-value).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.audit.eprocess import INF_LOG, SCALE_DOWN, NoiseEvidence
from app.audit.gen_noise_ksa import KSAEvidence, ksa_evidence, observe_ksa
from app.audit.gen_power import GEN_ALTERNATIVES, GenerationDesign, alternative_release
from app.audit.noise import VotingNoise
from app.mechanisms.lse import logsumexp_rows

TOKEN = ("clip_softmax", "poe", "mozo")  # white-box through the in-process step trace (``app.mechanisms.step_trace``)
COVERED = ("esa", *TOKEN, "ksa")
REMOTE_TOKEN_GAP = ("a remote target's internals carry per step only the released token, its log-probability and "
                    "the largest probability, not the exemplar-derived score vector (which only an in-process "
                    "target hands to the auditor): the likelihood of a step under a rescaled temperature cannot be "
                    "computed")
WHITE_BOX_GAPS: dict[str, str] = {}  # mechanism -> why its sequential audit reads no noise
NOT_NEAREST = ("a released text is not the zero-shot candidate nearest the reported noisy mean (esa releases the "
               "nearest: tight-auditing Algorithm 3 line 11)")


OUTSIDE = ("a released token has probability 0 under the claimed step law (outside the public candidate set: "
           "-inf score)")


def white_box_gap(mechanism: str, remote: bool = False) -> str | None:
    """Why a white-box sequential audit of ``mechanism`` reads no noise (None: it does); ``remote``:
    a gateway target (the token mechanisms' statistic never leaves the process)."""
    if mechanism in TOKEN and remote:
        return REMOTE_TOKEN_GAP
    if mechanism in COVERED:
        return None
    return WHITE_BOX_GAPS.get(mechanism, f"{mechanism} reports no noisy statistic")


def white_box_evidence(design: GenerationDesign | None, alternatives: Sequence[str], claimed_epsilon: float,
                       delta: float) -> NoiseEvidence | None:
    """NoiseEvidence over the claimed noise of ``design`` (esa: N(0, sigma^2) per coordinate; the token
    mechanisms: Gumbel on the scores at the claimed temperature) and each alternative's (its multiplier
    of gen_power.GEN_ALTERNATIVES; non_private: no noise for esa, not testable from the token
    statistic: None; ksa: ``gen_noise_ksa``), or None where the design's mechanism is not covered."""
    if design is None or design.mechanism not in COVERED:
        return None
    if design.mechanism == "ksa":
        return ksa_evidence(design, alternatives, claimed_epsilon, delta)
    kind = "gumbel" if design.mechanism in TOKEN else "gaussian"
    claimed = VotingNoise(kind, float(design.scale), float(claimed_epsilon), float(delta))
    alts: dict[str, VotingNoise | None] = {}
    for name in alternatives:
        f = GEN_ALTERNATIVES[name]
        alts[name] = (None if f is None and kind == "gumbel" else
                      VotingNoise(kind, float(design.scale), float(claimed_epsilon), float(delta),
                                  noise_multiplier=0.0 if f is None else float(f)))
    return NoiseEvidence(claimed, alts)


def observe_noise(ev: NoiseEvidence, obs: Any) -> bool:
    """Feed one answer's reported vectors (esa), token steps (clip_softmax, poe, mozo) or ksa release to ``ev``; True
    where the answer carried them."""
    if isinstance(ev, KSAEvidence):
        rel = getattr(obs, "ksa_release", None)
        if rel is not None:
            observe_ksa(ev, *rel)
        return rel is not None
    steps = getattr(obs, "token_steps", None)
    if steps is not None and ev.kind == "gumbel":
        for values, pos in steps:
            observe_token(ev, values, pos)
        return True
    clean, noisy = getattr(obs, "clean_vector", None), getattr(obs, "noisy_vector", None)
    if clean is None or noisy is None:
        return False
    ev.update(np.asarray(clean, dtype=float).ravel(), np.asarray(noisy, dtype=float).ravel(), None)
    if getattr(obs, "nearest", None) is False:
        ev.flag(NOT_NEAREST)
    return True


def compact_step(statistic: np.ndarray, token: int) -> tuple[np.ndarray, int]:
    """A step's statistic over its candidates (the finite entries) and the released token's position
    among them (-1: the token has a -inf score, or is no token of the vocabulary)."""
    s = np.asarray(statistic, dtype=float).ravel()
    finite = np.isfinite(s)
    if not 0 <= int(token) < s.size or not finite[int(token)]:
        return s[finite], -1
    return s[finite], int(np.count_nonzero(finite[:int(token)]))


def observe_token(ev: NoiseEvidence, values: np.ndarray, pos: int) -> None:
    """One private step: the claim's scores a = statistic / tau_claim (``ev.scale``), the released
    candidate ``pos``; the factors of the module docstring through ``NoiseEvidence.add_log_ratios``."""
    if pos < 0:
        ev.flag(OUTSIDE)
        return
    a = np.asarray(values, dtype=float) / ev.scale
    scales = [m for m in dict.fromkeys((1.0, *SCALE_DOWN, *(float(alt.noise_multiplier) for alt in
                                                           ev.alternatives.values() if alt is not None)))
              if m != 0.0]
    # log softmax(a / f)(x_t), the step law at temperature x f, for every f at once (logsumexp_rows: per row
    # the arithmetic of scipy's logsumexp(a / f))
    lse = logsumexp_rows(a[None, :] / np.asarray(scales)[:, None])
    log_p = {f: float(a[pos] / f - v) for f, v in zip(scales, lse)}
    base = log_p[1.0]
    down = [log_p[f] - base for f in SCALE_DOWN]
    top = float(np.max(a))
    alts: dict[str, float] = {}
    for name, alt in ev.alternatives.items():
        if alt is None or float(alt.noise_multiplier) == 1.0:
            continue
        m = float(alt.noise_multiplier)
        if m == 0.0:  # the argmax, either tie-break: a non-argmax release has probability 0 there
            alts[name] = 0.0 if a[pos] >= top - 1e-9 * max(1.0, abs(top)) else INF_LOG
        else:
            alts[name] = base - log_p[m]
    ev.add_log_ratios(down, alts)


def noise_finding(ev: NoiseEvidence) -> str:
    """What the noise evidence against the claim found, for a verdict's reason."""
    if ev.impossible:
        return "; ".join(ev.impossible)
    if isinstance(ev, KSAEvidence):
        return (f"ksa's released k* and test outcomes are likelier with its noises below the claimed scale (the "
                f"exponential mechanism's temperature {ev.scale:.4g} and PTR's sigma, both x 1/2, 1/4, 1/10: "
                f"mixture of likelihood ratios {ev.e_violation:.3g})")
    if ev.kind == "gumbel":
        return (f"the released tokens are likelier at a lower temperature than the claimed {ev.scale:.4g} (mixture "
                f"of likelihood ratios of the step laws at temperature x 1/2, 1/4, 1/10 over the claimed: "
                f"{ev.e_violation:.3g})")
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


__all__ = ["COVERED", "ESAWhiteBoxTarget", "NOT_NEAREST", "OUTSIDE", "REMOTE_TOKEN_GAP", "TOKEN", "WHITE_BOX_GAPS",
           "compact_step", "noise_finding", "observe_noise", "observe_token", "white_box_evidence", "white_box_gap"]
