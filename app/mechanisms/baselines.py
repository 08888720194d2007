"""The non-private utility baselines as mechanisms (same result shape as ``rnm``/``poe``).

* ``zero_shot``: instruction and query only; reads no exemplar, so it costs
  epsilon 0 (reported as a pure-DP cost of 0).
* ``icl``: every exemplar in one prompt (``app.icl.baselines.icl``); no
  guarantee at all (epsilon None = infinite in the cost dict).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from app.icl import baselines as icl_baselines
from app.mechanisms import _icl
from app.mechanisms.base import (
    ClassificationResult,
    Mechanism,
    MechanismParams,
    ParamsArg,
    check_labels,
    check_query,
    non_private_cost,
    normalize_exemplars,
    register,
)
from app.mechanisms.errors import MechanismParamError
from app.privacy.accountant import PrivacyCost

if TYPE_CHECKING:
    from app.llm.types import LanguageModel


@dataclass(frozen=True)
class BaselineParams(MechanismParams):
    """``calibrate``: contextual calibration (Zhao et al. 2021) of the one prompt."""

    calibrate: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.calibrate, bool):
            raise MechanismParamError("must be true or false", param="calibrate")


def _zero_cost(params: dict[str, Any]) -> dict[str, Any]:
    d = PrivacyCost(0.0, 0.0, "add-remove", "zero_shot", params, orders=None, rdp=None, rho=0.0).to_dict()
    d["is_private"] = False  # not a DP mechanism; it reads no exemplar, hence epsilon 0
    d["reads_exemplars"] = False
    return d


class ZeroShot(Mechanism):
    name = "zero_shot"
    is_private = False  # no mechanism at all; it simply reads no exemplar
    reads_exemplars = False
    params_type = BaselineParams

    def parse_params(self, params: ParamsArg) -> BaselineParams:
        return BaselineParams.from_mapping(params)

    def cost(self, params: ParamsArg = None, n_exemplars: int | None = None) -> dict[str, Any]:
        return _zero_cost(self.parse_params(params).to_dict())

    def classify(
        self,
        lm: LanguageModel,
        exemplars: Sequence[Any],
        query: str,
        labels: Sequence[str],
        template: Any = None,
        params: ParamsArg = None,
        rng: np.random.Generator | None = None,
    ) -> ClassificationResult:
        p = self.parse_params(params)
        labs = check_labels(labels)
        res = icl_baselines.zero_shot(lm, check_query(query), labs, _icl.template_of(template), calibrate=p.calibrate)
        return ClassificationResult(
            res.label, res.label_index, self.name, self.cost(p),
            {"label_probs": res.probs, "uncalibrated_probs": res.uncalibrated}, res.distribution,
        )


class ICL(Mechanism):
    name = "icl"
    is_private = False
    params_type = BaselineParams

    def parse_params(self, params: ParamsArg) -> BaselineParams:
        return BaselineParams.from_mapping(params)

    def cost(self, params: ParamsArg = None, n_exemplars: int | None = None) -> dict[str, Any]:
        return non_private_cost(self.name, self.parse_params(params).to_dict())

    def classify(
        self,
        lm: LanguageModel,
        exemplars: Sequence[Any],
        query: str,
        labels: Sequence[str],
        template: Any = None,
        params: ParamsArg = None,
        rng: np.random.Generator | None = None,
    ) -> ClassificationResult:
        p = self.parse_params(params)
        ex = normalize_exemplars(exemplars)
        if not ex:
            raise MechanismParamError("at least one exemplar is needed", param="exemplars")
        labs = check_labels(labels)
        res = icl_baselines.icl(lm, ex, check_query(query), labs, _icl.template_of(template), calibrate=p.calibrate)
        return ClassificationResult(
            res.label, res.label_index, self.name, self.cost(p),
            {"label_probs": res.probs, "uncalibrated_probs": res.uncalibrated, "exemplar_count": len(ex)},
            res.distribution,
        )


def synthetic_cost(params: dict[str, Any]) -> dict[str, Any]:
    """epsilon 0: ICL on a public DP synthetic set is post-processing of that set (Dwork & Roth 2014
    Prop. 2.1); its whole cost was charged once, by the synthesize job, on the parent's ledger."""
    d = PrivacyCost(0.0, 0.0, "add-remove", "synthetic_icl", params, orders=None, rdp=None, rho=0.0).to_dict()
    d["is_private"] = False
    d["reads_exemplars"] = True  # public (DP output) exemplars only
    d["post_processing"] = True
    return d


class SyntheticICL(ICL):
    """``synthetic_icl``: the ``icl`` prompt over the demonstrations of a PUBLIC synthetic set
    (Tang et al. 2024: DP few-shot generation, then ordinary ICL with the synthetic shots).
    The library cannot see where exemplars come from: the API serves it on public sets only."""

    name = "synthetic_icl"

    # classify is ICL's: it reports ``self.name`` and ``self.cost(p)``, i.e. this name and the synthetic cost.
    def cost(self, params: ParamsArg = None, n_exemplars: int | None = None) -> dict[str, Any]:
        return synthetic_cost(self.parse_params(params).to_dict())


register(ZeroShot())
register(ICL())
register(SyntheticICL())
