"""The check a black-box generation pass rests on: does the target follow the design model's claimed law?

A generation audit's power (``app.audit.gen_power``) and the sequential audit's alternatives
(``app.audit.gen_sequential``) are predictions of the *design model*: the canary's unit says y1,
every other unit y0, so the claimed mechanism releases y1 with probability mu_c(in) with the canary
and mu_c(out) without it (``alternative_release(design, "claimed")``). A target whose model does not
behave so (SmolLM2 answers y1 without the canary 40-100% of the time) makes those predictions
meaningless: a broken esa or mozo run at 100x its claim passed black-box in 6-10 calls on SmolLM2
(``benchmarks/gen_sequential_inprocess.py``), and the fixed design's "P(detect) 0.9" was a number
about another target. So a pass that rests on the black-box evidence needs

* enough pairs (``pairs_needed``) for a test of the claimed law at level alpha to see a shift of
  ``MODEL_CHECK_DELTA`` in either share of y1 -- the planner adds it to every design whose pass would
  rest on the model, and the verdict withholds the pass below it; and
* both observed shares within ``Z_BLOCK`` standard errors of the claimed law's (``fits``).

Both are blockers only: they can turn a pass into inconclusive, never into a violation (the
violation tests hold for any model). Functions of the law alone (no gen_power import: gen_power and
gen_sequential both use them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MODEL_CHECK_DELTA = 0.25  # the shift in a share of y1 the check must be able to see
Z_BLOCK = 2.0  # a pass waits while a share lies more than this many standard errors from the claimed law's


def _kl(q: float, m: float) -> float:
    q, m = min(max(q, 1e-3), 1 - 1e-3), min(max(m, 1e-3), 1 - 1e-3)
    return q * math.log(q / m) + (1 - q) * math.log((1 - q) / (1 - m))


def pairs_needed(law: Sequence[float], alpha: float) -> int:
    """Pairs for a test at level alpha (ln(4 / alpha): four one-sided tests averaged) to see a shift
    of MODEL_CHECK_DELTA in either share: ln(4 / alpha) / KL per trial, the smallest KL over both
    directions and hypotheses (Wald's bound: a betting test needs somewhat more)."""
    worst = min(_kl(m + d, m) for m in law for d in (MODEL_CHECK_DELTA, -MODEL_CHECK_DELTA)
                if 0.0 <= m + d <= 1.0)
    return int(math.ceil(math.log(4.0 / alpha) / worst))


def fits(law: Sequence[float], y1_with: int, y1_without: int, pairs_with: int, pairs_without: int | None = None) -> bool:
    """Both observed shares of y1 (with / without the canary) within Z_BLOCK standard errors of the law's."""
    counts = ((y1_with, pairs_with), (y1_without, pairs_with if pairs_without is None else pairs_without))
    for (k, n), m in zip(counts, law):
        se = math.sqrt(max(m * (1.0 - m), 1e-6) / max(1, n))
        if abs(k / max(1, n) - m) > Z_BLOCK * se:
            return False
    return True


@dataclass
class FixedModelCheck:
    """The design-model check of a finished fixed-size audit: observed y1 shares against the law."""

    law: tuple[float, float]
    y1_with: int
    members: int
    y1_without: int
    nonmembers: int
    pairs_needed: int

    @property
    def enough(self) -> bool:
        return min(self.members, self.nonmembers) >= self.pairs_needed

    @property
    def fits(self) -> bool:
        return fits(self.law, self.y1_with, self.y1_without, self.members, self.nonmembers)

    @property
    def allows_pass(self) -> bool:
        return self.enough and self.fits

    def reason(self) -> str:
        """Why a pass that rests on the design model is withheld ('' where it is not)."""
        if not self.enough:
            return (f"a black-box pass rests on the design model, and a test of its claimed law needs "
                    f"{self.pairs_needed} trials per hypothesis to see a shift of {MODEL_CHECK_DELTA:g} in a share "
                    f"of y1 (this audit has {min(self.members, self.nonmembers)})")
        if not self.fits:
            return (f"the target does not follow the design model: y1 was released in "
                    f"{self.y1_with}/{self.members} trials with the canary and {self.y1_without}/{self.nonmembers} "
                    f"without, where the claimed law gives {self.law[0]:.2f} / {self.law[1]:.2f} (more than "
                    f"{Z_BLOCK:g} standard errors off), so the detection probabilities, which that model "
                    "predicts, do not describe this target: not a pass")
        return ""

    def to_dict(self) -> dict[str, Any]:
        return {"law": list(self.law), "y1_with": self.y1_with, "members": self.members,
                "y1_without": self.y1_without, "nonmembers": self.nonmembers, "pairs_needed": self.pairs_needed,
                "fits": self.fits, "enough": self.enough, "delta": MODEL_CHECK_DELTA, "z_block": Z_BLOCK}


def fixed_model_check(law: Sequence[float], trials: Sequence[dict[str, Any]], y1: str, alpha: float) -> FixedModelCheck:
    """The check over a fixed audit's trial rows (``member``, ``released``)."""
    kw = sum(1 for t in trials if t.get("member") and t.get("released") == y1)
    ko = sum(1 for t in trials if not t.get("member") and t.get("released") == y1)
    nw = sum(1 for t in trials if t.get("member"))
    return FixedModelCheck((float(law[0]), float(law[1])), kw, nw, ko, len(trials) - nw, pairs_needed(law, alpha))


__all__ = ["MODEL_CHECK_DELTA", "Z_BLOCK", "FixedModelCheck", "fits", "fixed_model_check", "pairs_needed"]
