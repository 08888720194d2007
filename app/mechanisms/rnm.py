"""``rnm``: private voting / report-noisy-max over disjoint partitions.

Tight-auditing paper (Xia et al.), Algorithm 2; Wu et al. 2024 (DP-ICL):
split the exemplars into T disjoint partitions, ask the model once per
partition (one batched call for all T prompts), let each partition vote its
top label, add noise to every label's count (zero-vote labels included) and
release the argmax.

Noise:
  * ``gaussian`` (default): N(0, sigma^2) per count, sigma from
    ``app.privacy.calibrate_gaussian`` (analytic, Balle & Wang 2018, or
    classical, Dwork & Roth 2014 Thm A.1) at the vote histogram's L2
    sensitivity: sqrt 2 when one exemplar moves one vote (replace-one, and
    add/remove with multi-exemplar or sub-sampled partitions), 1 when it adds
    or removes one voter (add/remove, one exemplar per partition, all used).
    (eps, delta)-DP with the exact eps of that sigma.
  * ``laplace``: pure eps-DP report-noisy-max, Lap(1/eps) or Lap(2/eps)
    (Dwork & Roth 2014 Claim 3.9; ``sensitivity.laplace_rnm_scale``).
  * ``gumbel``: pure eps-DP report-noisy-max with Gumbel(1/eps) or Gumbel(2/eps)
    noise, i.e. the exponential mechanism on the votes
    (``sensitivity.gumbel_rnm_scale``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
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
    check_choice,
    check_int,
    check_label_probs,
    check_labels,
    check_number,
    register,
    resolve_unit_count,
)
from app.mechanisms.errors import MechanismParamError
from app.mechanisms.rng import resolve_rng
from app.privacy.accountant import DpEvent, ExponentialMechanismEvent, GaussianEvent, PureDPEvent
from app.privacy.calibration import calibrate_gaussian
from app.privacy.errors import PrivacyInputError

NOISES = ("gaussian", "laplace", "gumbel")
CALIBRATIONS = ("analytic", "classical")


@dataclass(frozen=True)
class RNMParams(MechanismParams):
    """``partitions`` None: as many as the exemplars fill (n // shots_per_partition).
    ``delta`` and ``calibration`` apply to Gaussian noise only (the pure-DP variants
    report delta 0). ``calibrate``: contextual calibration of each partition's label
    distribution (Zhao et al. 2021, as Wu et al. do). ``exact_distribution``: also
    integrate the exact law of the released label (white-box audits)."""

    epsilon: float = 1.0
    delta: float = 1e-5
    adjacency: str = "replace-one"
    noise: str = "gaussian"
    calibration: str = "analytic"
    partitions: int | None = None
    shots_per_partition: int = 1
    calibrate: bool = False
    exact_distribution: bool = False

    def __post_init__(self) -> None:
        s = object.__setattr__
        s(self, "epsilon", check_number(self.epsilon, "epsilon", lo=0.0))
        s(self, "delta", check_number(self.delta, "delta", lo=0.0, hi=1.0))
        s(self, "adjacency", sens.parse_adjacency(self.adjacency).value)
        s(self, "noise", check_choice(self.noise, "noise", NOISES))
        s(self, "calibration", check_choice(self.calibration, "calibration", CALIBRATIONS))
        s(self, "partitions", check_int(self.partitions, "partitions", optional=True))
        s(self, "shots_per_partition", check_int(self.shots_per_partition, "shots_per_partition"))
        for name in ("calibrate", "exact_distribution"):
            if not isinstance(getattr(self, name), bool):
                raise MechanismParamError("must be true or false", param=name)


@dataclass(frozen=True)
class NoisePlan:
    """The noise one answer gets and the guarantee that follows (data-independent)."""

    noise: str
    scale: float  # sigma (gaussian) or b (laplace, gumbel)
    epsilon: float
    delta: float
    change: sens.UnitChange
    l2_sensitivity: float
    partitions: int
    method: str
    event: DpEvent
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def params(self, p: RNMParams) -> dict[str, Any]:
        d = p.to_dict()
        d.pop("exact_distribution")
        d.update(
            # The resolved count would equal n when ``partitions`` is left to default: under
            # add/remove |D| is private, so the cost (which callers see) keeps the request's value.
            partitions=p.partitions,
            scale=self.scale,
            sigma=self.scale if self.noise == "gaussian" else None,
            target_epsilon=p.epsilon,
            unit_change=self.change.value,
            l2_sensitivity=self.l2_sensitivity,
        )
        if self.warnings:
            d["warnings"] = list(self.warnings)
        return d


def resolve_partitions(p: RNMParams, n: int) -> int:
    """T for n exemplars; raises naming ``partitions`` when T x shots exceeds n."""
    return resolve_unit_count(n, p.partitions, p.shots_per_partition, "partitions", "shots_per_partition")


@functools.lru_cache(maxsize=256)
def _gaussian_calibration(epsilon: float, delta: float, l2: float, method: str) -> tuple[float, float, str, tuple[str, ...]]:
    """(sigma, achieved epsilon, method, warnings) of ``calibrate_gaussian``: a pure function of its
    arguments, solved once per distinct (epsilon, delta, sensitivity, method) instead of twice per
    answer (the cost before the model work, the noise after it; ~1 ms of root finding each). A
    calibration that fails raises every time (lru_cache keeps no exceptions)."""
    cal = calibrate_gaussian(epsilon, delta, sensitivity=l2, method=method)
    return cal.value, cal.epsilon, cal.method, tuple(cal.warnings)


def plan_noise(p: RNMParams, n: int) -> NoisePlan:
    t = resolve_partitions(p, n)
    change = sens.unit_change(
        p.adjacency,
        exemplars_per_unit=p.shots_per_partition,
        uses_every_exemplar=p.partitions is None,
    )
    l2 = sens.vote_l2_sensitivity(change)
    if p.noise == "gaussian":
        try:
            sigma, achieved, method, warnings = _gaussian_calibration(p.epsilon, p.delta, l2, p.calibration)
        except PrivacyInputError as exc:
            param = {"target_epsilon": "epsilon"}.get(exc.param or "", exc.param)
            raise MechanismParamError(exc.message, param=param) from None
        return NoisePlan(
            "gaussian", sigma, achieved, p.delta, change, l2, t, f"gaussian-{method}",
            GaussianEvent(sigma=sigma, sensitivity=l2), warnings,
        )
    if p.noise == "laplace":
        b = sens.laplace_rnm_scale(p.epsilon, change)
        return NoisePlan("laplace", b, p.epsilon, 0.0, change, l2, t, "pure-laplace-rnm", PureDPEvent(p.epsilon))
    b = sens.gumbel_rnm_scale(p.epsilon, change)
    return NoisePlan("gumbel", b, p.epsilon, 0.0, change, l2, t, "pure-exponential", ExponentialMechanismEvent(p.epsilon))


def noisy_votes(votes: npt.ArrayLike, plan: NoisePlan, rng: np.random.Generator, size: int | None = None) -> FloatArray:
    """Clean votes plus the plan's noise on every count (``size`` independent draws)."""
    if plan.noise == "gaussian":
        return agg.gaussian_noise(votes, plan.scale, rng, size)
    if plan.noise == "laplace":
        return agg.laplace_noise(votes, plan.scale, rng, size)
    return agg.gumbel_noise(votes, plan.scale, rng, size)


def exact_distribution(votes: npt.ArrayLike, plan: NoisePlan) -> FloatArray:
    """Exact law of the released label given the clean votes."""
    if plan.noise == "gaussian":
        return agg.gaussian_rnm_distribution(votes, plan.scale)
    if plan.noise == "laplace":
        return agg.laplace_rnm_distribution(votes, plan.scale)
    return agg.gumbel_rnm_distribution(votes, plan.scale)


def _build_cost(plan: NoisePlan, p: RNMParams) -> dict[str, Any]:
    return cost_dict(
        plan.event,
        epsilon=plan.epsilon,
        delta=plan.delta,
        adjacency=sens.parse_adjacency(p.adjacency),
        mechanism=f"rnm-{plan.noise}",
        params=plan.params(p),
        method=plan.method,
    )


@functools.lru_cache(maxsize=256)
def _plan_cost(plan: NoisePlan, p: RNMParams) -> dict[str, Any]:
    """The cost dict of (plan, params), built once per distinct pair: an answer reports it before the
    model work (the budget precheck) and again with its release, and every answer with the same
    parameters has the same one (~0.06 ms of RDP curve and JSON-safe floats each; issue 27). Both
    are frozen dataclasses whose fields ``RNMParams`` normalises (float, int, str, bool: equal keys
    give the same dict, value and type). Never handed out: ``_fresh`` copies it."""
    return _build_cost(plan, p)


def _fresh(x: Any) -> Any:
    """A copy of a JSON-like value whose dicts and lists are new objects (the caller may change them)."""
    if type(x) is dict:
        return {k: _fresh(v) for k, v in x.items()}
    if type(x) is list:
        return [_fresh(v) for v in x] if any(type(v) is dict or type(v) is list for v in x) else list(x)
    return x


class RNM(UnitMechanism):
    name = "rnm"
    is_private = True
    params_type = RNMParams

    def parse_params(self, params: ParamsArg) -> RNMParams:
        return RNMParams.from_mapping(params)

    def unit_count(self, p: RNMParams, n: int) -> int:
        return resolve_partitions(p, n)

    def unit_size(self, p: RNMParams) -> int:
        return p.shots_per_partition

    def cost(self, params: ParamsArg = None, n_exemplars: int | None = None) -> dict[str, Any]:
        p = self.parse_params(params)
        if n_exemplars is None:  # the noise does not depend on n; n only validates the partitioning
            n_exemplars = (p.partitions or 1) * p.shots_per_partition
        plan = plan_noise(p, n_exemplars)
        return self._cost(plan, p)

    def _cost(self, plan: NoisePlan, p: RNMParams) -> dict[str, Any]:
        try:
            built = _plan_cost(plan, p)
        except TypeError:  # a plan that cannot be a cache key (not hashable): built afresh
            return _build_cost(plan, p)
        return _fresh(built)

    def _draw(
        self,
        label_probs: npt.ArrayLike,
        labs: Sequence[str],
        p: RNMParams,
        n_exemplars: int,
        rng: np.random.Generator | None,
        size: int | None,
    ) -> tuple[NoisePlan, FloatArray, FloatArray, FloatArray, IntArray | int]:
        plan = plan_noise(p, n_exemplars)
        probs = check_label_probs(label_probs, labs, "partitions")
        votes = agg.votes_from_distributions(probs)
        noisy = noisy_votes(votes, plan, resolve_rng(rng), size)
        return plan, probs, votes, noisy, agg.noisy_argmax(noisy)

    def release(
        self,
        label_probs: npt.ArrayLike,
        labels: Sequence[str],
        params: ParamsArg,
        n_exemplars: int,
        rng: np.random.Generator | None = None,
        partitions: IndexUnits | None = None,
    ) -> ClassificationResult:
        """The private step alone, from the partitions' label distributions (T, K): votes,
        noise, argmax. ``classify`` = partition + one batched model call + ``release``."""
        p = self.parse_params(params)
        labs = check_labels(labels)
        plan, probs, votes, noisy, drawn = self._draw(label_probs, labs, p, n_exemplars, rng, None)
        idx = int(drawn)  # one draw (size None): a scalar index
        dist = None
        if p.exact_distribution or plan.noise == "gumbel":
            dist = dict(zip(labs, map(float, exact_distribution(votes, plan))))
        internals: dict[str, Any] = {
            "clean_votes": votes,
            "noisy_votes": noisy,
            "noise": plan.noise,
            "noise_scale": plan.scale,
            "partition_count": plan.partitions,
            "partition_label_probs": probs,
            "partition_votes": [labs[i] for i in np.argmax(probs, axis=1)],
        }
        if partitions is not None:
            internals["partitions"] = [list(map(int, u)) for u in partitions]
        return ClassificationResult(labs[idx], idx, self.name, self._cost(plan, p), internals, dist)


register(RNM())
