"""``poe``: Private PoEtry (product of experts + exponential mechanism).

Each expert sees one exemplar (or a group of ``group_size`` exemplars, PoEtry
Appendix B.2) and the query; all experts go through the model in one batched
call. Expert e's per-label log-probability (normalised over the label set) is
clipped from below at -c, a_e(y) = max(log p_e(y), -c) in [-c, 0]; the
utilities are summed over experts, U(y) = sum_e a_e(y) (the log of the product
of experts, PoEtry Eq. 3), and a label is drawn with P(y) proportional to
exp(lam U(y)) (exponential mechanism, McSherry & Talwar 2007).

The PoEtry text we have lost its formulas; the constants are our own
derivation (docs/mechanisms.md, ``sensitivity.poe_utility_range``): a
neighbour changes U by a vector whose range is at most c when an expert is
added or removed whole (add/remove, one exemplar per expert, every exemplar an
expert) and at most 2c otherwise (replace-one; groups; sub-sampled experts),
so lam = eps/c or eps/(2c) gives pure eps-DP, and both are tight.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import numpy.typing as npt

from app.mechanisms import aggregate as agg
from app.mechanisms import sensitivity as sens
from app.mechanisms._cost import cost_dict
from app.mechanisms.aggregate import FloatArray, IntArray
from app.mechanisms.base import (
    ClassificationResult,
    IndexUnits,
    MechanismParams,
    ParamsArg,
    UnitMechanism,
    check_int,
    check_label_probs,
    check_labels,
    check_number,
    register,
    resolve_unit_count,
)
from app.mechanisms.errors import MechanismParamError
from app.mechanisms.rng import resolve_rng
from app.privacy.accountant import ExponentialMechanismEvent

# Chosen by the sweep ``benchmarks/bench_classify.py sweep-clip --calibrate`` on validation queries of
# the bundled task (docs/mechanisms.md): the best mean accuracy over T in {4, 8}, eps in {1, 2, 4, 8},
# separately for raw and contextually calibrated expert distributions (calibration flattens the
# copied-label bias, so a tighter clip suffices).
DEFAULT_CLIP = 4.0
DEFAULT_CLIP_CALIBRATED = 2.0


@dataclass(frozen=True)
class PoEParams(MechanismParams):
    """``experts`` None: every exemplar (or group) is an expert. ``clip`` is c > 0 in nats;
    None gives DEFAULT_CLIP, or DEFAULT_CLIP_CALIBRATED when ``calibrate``."""

    epsilon: float = 1.0
    adjacency: str = "replace-one"
    clip: float | None = None
    group_size: int = 1
    experts: int | None = None
    calibrate: bool = False

    def __post_init__(self) -> None:
        s = object.__setattr__
        s(self, "epsilon", check_number(self.epsilon, "epsilon", lo=0.0))
        s(self, "adjacency", sens.parse_adjacency(self.adjacency).value)
        if not isinstance(self.calibrate, bool):
            raise MechanismParamError("must be true or false", param="calibrate")
        if self.clip is None:
            s(self, "clip", DEFAULT_CLIP_CALIBRATED if self.calibrate else DEFAULT_CLIP)
        s(self, "clip", check_number(self.clip, "clip", lo=0.0))
        s(self, "group_size", check_int(self.group_size, "group_size"))
        s(self, "experts", check_int(self.experts, "experts", optional=True))


def resolve_experts(p: PoEParams, n: int) -> int:
    return resolve_unit_count(n, p.experts, p.group_size, "experts", "group_size")


def _clip(p: PoEParams) -> float:
    """c: ``PoEParams.__post_init__`` replaces a None clip by its default, so a built params has a number."""
    if p.clip is None:  # unreachable for a constructed PoEParams
        raise MechanismParamError("must be a number", param="clip")
    return p.clip


def unit_change(p: PoEParams) -> sens.UnitChange:
    return sens.unit_change(p.adjacency, exemplars_per_unit=p.group_size, uses_every_exemplar=p.experts is None)


def inverse_temperature(p: PoEParams) -> float:
    return sens.poe_inverse_temperature(p.epsilon, _clip(p), unit_change(p))


class PoE(UnitMechanism):
    name = "poe"
    is_private = True
    params_type = PoEParams

    def parse_params(self, params: ParamsArg) -> PoEParams:
        return PoEParams.from_mapping(params)

    def unit_count(self, p: PoEParams, n: int) -> int:
        return resolve_experts(p, n)

    def unit_size(self, p: PoEParams) -> int:
        return p.group_size

    def cost(self, params: ParamsArg = None, n_exemplars: int | None = None) -> dict[str, Any]:
        p = self.parse_params(params)
        if n_exemplars is not None:
            resolve_experts(p, n_exemplars)  # validates experts x group_size <= n
        return self._cost(p)

    def _cost(self, p: PoEParams) -> dict[str, Any]:
        # ``experts`` stays as requested (None = all): the resolved count would reveal n, which
        # is private under add/remove; it is in the internals instead.
        change = unit_change(p)
        d = p.to_dict()
        d.update(
            inverse_temperature=inverse_temperature(p),
            utility_range=sens.poe_utility_range(_clip(p), change),
            unit_change=change.value,
        )
        return cost_dict(
            ExponentialMechanismEvent(p.epsilon),
            epsilon=p.epsilon,
            delta=0.0,
            adjacency=sens.parse_adjacency(p.adjacency),
            mechanism="poe",
            params=d,
            method="pure-exponential",
        )

    def _draw(
        self,
        label_probs: npt.ArrayLike,
        labs: Sequence[str],
        p: PoEParams,
        n_exemplars: int,
        rng: np.random.Generator | None,
        size: int | None,
    ) -> tuple[FloatArray, FloatArray, FloatArray, float, FloatArray, IntArray | int]:
        resolve_experts(p, n_exemplars)
        probs = check_label_probs(label_probs, labs, "experts")
        clipped = agg.clipped_log_probs(probs, _clip(p))
        utility = clipped.sum(axis=0)
        lam = inverse_temperature(p)
        idx, noisy = agg.exponential_mechanism_sample(utility, lam, resolve_rng(rng), size)
        return probs, clipped, utility, lam, noisy, idx

    def release(
        self,
        label_probs: npt.ArrayLike,
        labels: Sequence[str],
        params: ParamsArg,
        n_exemplars: int,
        rng: np.random.Generator | None = None,
        experts: IndexUnits | None = None,
    ) -> ClassificationResult:
        """The private step alone, from the experts' label distributions (E, K)."""
        p = self.parse_params(params)
        labs = check_labels(labels)
        probs, clipped, utility, lam, noisy, drawn = self._draw(label_probs, labs, p, n_exemplars, rng, None)
        idx = int(drawn)  # one draw (size None): a scalar index
        dist = agg.exponential_mechanism_distribution(utility, lam)
        internals: dict[str, Any] = {
            "clipped_utility_sums": utility,
            "expert_clipped_log_probs": clipped,
            "expert_label_probs": probs,
            "inverse_temperature": lam,
            "expert_count": resolve_experts(p, n_exemplars),
            # The pre-sampling scores lam U: noisy_scores = clean_scores + Gumbel(0, 1), so an internal
            # auditor can re-apply the noise (tight-auditing Alg. 1, the M' of line 1; app.audit).
            "clean_scores": lam * utility,
            "noisy_scores": noisy,  # lam U + Gumbel(1): its argmax is the released label
        }
        if experts is not None:
            internals["experts"] = [list(map(int, u)) for u in experts]
        return ClassificationResult(
            labs[idx], idx, self.name, self._cost(p), internals,
            dict(zip(labs, map(float, dist))),
        )


register(PoE())
