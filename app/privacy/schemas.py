"""Request models of the privacy-math operations, shared by the HTTP routes, the CLI's JSON
and the ``epsilon`` audit kind (pydantic only: no FastAPI, no SQL)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from app.jsonbody import JSONBody

# Finite numbers only: NaN / Infinity in a body are 422, never a 500.
Finite = Annotated[float, Field(allow_inf_nan=False)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Delta = Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)]
Orders = str | list[Finite]
AdjacencyName = Literal["add-remove", "replace-one", "unbounded", "bounded"]
Conversion = Literal["best", "bbghs", "mironov"]


class _Body(JSONBody):
    model_config = ConfigDict(extra="forbid")


class CalibrateRequest(_Body):
    mechanism: Literal["clip-softmax", "gaussian"]
    solve_for: Literal["temperature", "clip", "batch-size", "batch_size", "sigma"]
    target_epsilon: PositiveFloat
    delta: Delta
    compositions: Annotated[int, Field(ge=1)] | None = Field(
        None, description="releases composed: sequences x tokens (required for clip-softmax)"
    )
    temperature: PositiveFloat | None = None
    clip: PositiveFloat | None = None
    batch_size: Annotated[int, Field(ge=1)] | None = None
    sensitivity: PositiveFloat | None = Field(None, description="L2 sensitivity (gaussian; default 1)")
    orders: Orders | None = Field(None, description="'2-99', '2,3,4.5' or a list; default dp-accounting's grid")
    adjacency: AdjacencyName = "add-remove"
    method: Literal["analytic", "rdp", "classical"] | None = Field(None, description="gaussian only")
    conversion: Conversion = "best"
    lower: PositiveFloat | None = Field(None, description="search lower bound for the solved parameter")
    upper: PositiveFloat | None = Field(None, description="search upper bound for the solved parameter")


class ConvertRequest(_Body):
    rdp: list[Annotated[float, Field(ge=0)]] | None = Field(
        None, description="RDP curve, one value per order (may be +inf only via the library)"
    )
    orders: Orders | None = None
    rho: NonNegFloat | None = None
    pure_epsilon: NonNegFloat | None = None
    mu: NonNegFloat | None = None
    sigma: PositiveFloat | None = None
    sensitivity: PositiveFloat | None = None
    count: Annotated[int, Field(ge=1)] = 1
    delta: Delta | None = None
    epsilon: NonNegFloat | None = None
    to: Literal["epsilon", "delta", "mu", "rho"] | None = None
    adjacency: AdjacencyName = "add-remove"
    to_adjacency: AdjacencyName | None = None
    conversion: Conversion = "best"


class EmpiricalRequest(_Body):
    tp: Annotated[int, Field(ge=0)] | None = None
    fn: Annotated[int, Field(ge=0)] | None = None
    fp: Annotated[int, Field(ge=0)] | None = None
    tn: Annotated[int, Field(ge=0)] | None = None
    trials: Annotated[int, Field(ge=1)] | None = None
    accuracy: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    correct: Annotated[int, Field(ge=0)] | None = None
    confidence: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = 0.95
    delta: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = 0.0
