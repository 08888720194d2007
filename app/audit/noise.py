"""The private-voting noise as an object the audit can re-apply, and deliberate bugs.

``VotingNoise.sample(votes, rng)`` adds a report-noisy-max mechanism's noise to
one or many clean vote vectors at once (vectorised: the bootstrap of the
tight-auditing paper, Algorithm 1 lines 6-7, draws 400,000 at a time).

Bugs, for showing that an audit catches them (never served: the broken
mechanism lives here, not in the mechanism registry):

* ``noise_multiplier`` < 1: noise scaled down (e.g. 0.25, "four times too small");
* ``winner_only``: noise added only to the winning (largest clean) count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

BUGS = ("none", "noise_quarter", "noise_tenth", "winner_only")


@dataclass(frozen=True)
class VotingNoise:
    kind: str  # gaussian | laplace | gumbel
    scale: float  # the correct scale (sigma or b) for the claimed epsilon
    epsilon: float  # claimed
    delta: float  # claimed
    noise_multiplier: float = 1.0  # bug when < 1
    winner_only: bool = False  # bug

    @property
    def is_broken(self) -> bool:
        return self.noise_multiplier != 1.0 or self.winner_only

    @property
    def applied_scale(self) -> float:
        return self.scale * self.noise_multiplier

    def with_bug(self, bug: str | Mapping[str, Any] | None) -> VotingNoise:
        return replace(self, **parse_bug(bug))

    def sample(self, votes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """votes (K,) or (n, K) -> noisy scores of the same shape."""
        v = np.asarray(votes, dtype=float)
        s = self.applied_scale
        if self.kind == "gaussian":
            z = rng.standard_normal(v.shape) * s
        elif self.kind == "laplace":
            z = rng.laplace(0.0, s, v.shape)
        elif self.kind == "gumbel":
            z = rng.gumbel(0.0, s, v.shape)
        else:
            raise ValueError(f"unknown noise {self.kind!r}")
        if self.winner_only:
            # BUG: only the largest clean count (ties: lowest index, as np.argmax) gets noise.
            mask = np.zeros(v.shape, dtype=bool)
            win = np.argmax(v, axis=-1)
            np.put_along_axis(mask, np.expand_dims(win, -1), True, axis=-1)
            z = np.where(mask, z, 0.0)
        return v + z

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "scale": self.scale, "applied_scale": self.applied_scale,
                "epsilon_claimed": self.epsilon, "delta_claimed": self.delta,
                "noise_multiplier": self.noise_multiplier, "winner_only": self.winner_only}


def parse_bug(bug: str | Mapping[str, Any] | None) -> dict[str, Any]:
    if bug is None or bug == "none":
        return {"noise_multiplier": 1.0, "winner_only": False}
    if isinstance(bug, Mapping):
        mult = float(bug.get("noise_multiplier", 1.0))
        if not (math.isfinite(mult) and mult > 0):
            raise ValueError("noise_multiplier must be > 0")
        unknown = set(bug) - {"noise_multiplier", "winner_only"}
        if unknown:
            raise ValueError(f"unknown bug fields {sorted(unknown)}")
        return {"noise_multiplier": mult, "winner_only": bool(bug.get("winner_only", False))}
    if bug == "noise_quarter":
        return {"noise_multiplier": 0.25, "winner_only": False}
    if bug == "noise_tenth":
        return {"noise_multiplier": 0.1, "winner_only": False}
    if bug == "winner_only":
        return {"noise_multiplier": 1.0, "winner_only": True}
    raise ValueError(f"unknown bug {bug!r}; use one of {', '.join(BUGS)} or a mapping")


def rnm_noise(params: Mapping[str, Any] | Any, n_exemplars: int, bug: Any = None) -> VotingNoise:
    """The noise ``rnm`` adds for these params and this many exemplars (its own calibration,
    ``app.mechanisms.rnm.plan_noise``), optionally with a bug."""
    from app.mechanisms.rnm import RNMParams, plan_noise

    p = RNMParams.from_mapping(params)
    plan = plan_noise(p, n_exemplars)
    return VotingNoise(plan.noise, float(plan.scale), float(plan.epsilon), float(plan.delta)).with_bug(bug)


def gaussian_voting_noise(epsilon: float, delta: float, sensitivity: float = math.sqrt(2.0), bug: Any = None) -> VotingNoise:
    """Gaussian report-noisy-max calibrated (analytic, Balle & Wang 2018) to (epsilon, delta) at the
    vote histogram's L2 sensitivity (sqrt 2 when one exemplar moves one vote, replace-one)."""
    from app.privacy.calibration import calibrate_gaussian

    cal = calibrate_gaussian(epsilon, delta, sensitivity=sensitivity, method="analytic")
    return VotingNoise("gaussian", float(cal.value), float(cal.epsilon), float(delta)).with_bug(bug)


def poe_noise(params: Mapping[str, Any] | Any, n_exemplars: int, bug: Any = None) -> VotingNoise:
    """The noise ``poe`` adds, on the scale of its pre-sampling scores ``clean_scores = lam U``
    (internals): Gumbel(0, 1), since sampling P(y) ~ exp(lam U(y)) is argmax(lam U + Gumbel(0, 1))
    (Gumbel-max trick; ``aggregate.exponential_mechanism_sample``). Claimed: pure epsilon, delta 0.
    A bug ``noise_multiplier`` m draws argmax(lam U + m G) = argmax((lam/m) U + G): ``noise_quarter``
    is the exponential mechanism with lambda four times too large."""
    from app.mechanisms.poe import PoEParams, resolve_experts

    p = PoEParams.from_mapping(params)
    resolve_experts(p, n_exemplars)  # the same validation as a release
    return VotingNoise("gumbel", 1.0, float(p.epsilon), 0.0).with_bug(bug)
