"""Request models of the privacy-math operations, shared by the HTTP routes, the CLI's JSON
and the ``epsilon`` audit kind (pydantic only: no FastAPI, no SQL)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from app.jsonbody import JSONBody
from app.privacy._validate import MIN_EPSILON

# Finite numbers only: NaN / Infinity in a body are 422, never a 500.
Finite = Annotated[float, Field(allow_inf_nan=False)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Delta = Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)]
Orders = str | list[Finite]
# What the schema says of an order grid (app.privacy.rdp.parse_orders checks it, 422 naming `orders`): a spec
# ("2-99", "2,3,4.5", "2-10,12.5,20-30") or a list of orders, each > 1.
ORDERS_SCHEMA = {"anyOf": [
    {"type": "string", "pattern": "[^\\s,]"},
    {"type": "array", "items": {"type": "number", "exclusiveMinimum": 1}, "minItems": 1, "maxItems": 100_000},
    {"type": "null"},
]}
AdjacencyName = Literal["add-remove", "replace-one", "unbounded", "bounded"]
Conversion = Literal["best", "bbghs", "mironov"]


class _Body(JSONBody):
    model_config = ConfigDict(extra="forbid")


# The rules between fields that app/privacy/service.py checks, stated in each request's JSON Schema (and so in
# the OpenAPI document) as the variants a body may take: a field set to null is a field left out. What JSON
# Schema cannot state stays a 422 naming the field (an RDP curve as long as its orders, a target reachable within
# [lower, upper], counts that add up to trials, correct <= trials).
_NULL = {"type": "null"}
_GIVEN = {"not": _NULL}
_TARGET = {"type": "number", "minimum": MIN_EPSILON}  # app.privacy._validate.target_epsilon


def _clip_softmax(solve: list[str], others: tuple[str, str]) -> dict:
    return {"title": f"clip-softmax, solving for {solve[0]}: the other two of temperature, clip, batch_size given",
            "required": ["mechanism", "solve_for", "compositions", *others],
            "properties": {"mechanism": {"const": "clip-softmax"}, "solve_for": {"enum": solve},
                           "compositions": _GIVEN, **{o: _GIVEN for o in others},
                           "method": _NULL, "sensitivity": _NULL}}


CALIBRATE_VARIANTS = {"oneOf": [
    {"title": "gaussian, solving for sigma; orders only with method rdp",
     "required": ["mechanism", "solve_for"],
     "properties": {"mechanism": {"const": "gaussian"}, "solve_for": {"const": "sigma"},
                    "temperature": _NULL, "clip": _NULL, "batch_size": _NULL},
     "if": {"required": ["method"], "properties": {"method": {"const": "rdp"}}},
     "then": {}, "else": {"properties": {"orders": _NULL}}},
    _clip_softmax(["temperature"], ("clip", "batch_size")),
    _clip_softmax(["clip"], ("temperature", "batch_size")),
    _clip_softmax(["batch-size", "batch_size"], ("temperature", "clip")),
]}

_SOURCES = ("rdp", "rho", "pure_epsilon", "mu", "sigma")
# to_adjacency, when given, is the source's adjacency or a translation of it; with no source (or an RDP
# curve) there is nothing to translate: it is left out or names the same relation ("unbounded" is
# add-remove, "bounded" replace-one).
_SAME_ADJACENCY = {"anyOf": [
    {"properties": {"adjacency": {"enum": ["add-remove", "unbounded"]},
                    "to_adjacency": {"enum": ["add-remove", "unbounded", None]}}},
    {"required": ["adjacency"], "properties": {"adjacency": {"enum": ["replace-one", "bounded"]},
                                               "to_adjacency": {"enum": ["replace-one", "bounded", None]}}},
]}


def _from(src: str) -> dict:
    props: dict = {src: _GIVEN, **{o: _NULL for o in _SOURCES if o != src}}
    if src != "sigma":
        props["sensitivity"] = _NULL
    out: dict = {
        "title": f"from {src}: delta (to get epsilon) or epsilon (to get delta)",
        "required": [src] + (["orders"] if src == "rdp" else []),
        "properties": {**props, **({"orders": _GIVEN} if src == "rdp" else {})},
        "oneOf": [
            {"required": ["delta"], "properties": {"delta": _GIVEN, "epsilon": _NULL, "to": {"enum": ["epsilon", None]}}},
            {"required": ["epsilon"], "properties": {"epsilon": _GIVEN, "delta": _NULL, "to": {"enum": ["delta", None]}}},
        ],
    }
    if src == "rdp":
        out["allOf"] = [_SAME_ADJACENCY]
    return out


CONVERT_VARIANTS = {"oneOf": [
    *(_from(src) for src in _SOURCES),
    {"title": "back: (epsilon, delta) to the largest GDP mu or zCDP rho that implies it",
     "required": ["to", "epsilon", "delta"],
     "properties": {**{o: _NULL for o in _SOURCES}, "sensitivity": _NULL, "to": {"enum": ["mu", "rho"]},
                    "epsilon": _TARGET, "delta": _GIVEN, "count": {"const": 1}},
     "allOf": [_SAME_ADJACENCY]},
]}

_COUNTS = ("tp", "fn", "fp", "tn")
EMPIRICAL_VARIANTS = {"oneOf": [
    {"title": "the four counts of a membership test (trials, if given, is their sum)",
     "required": list(_COUNTS),
     "properties": {**{c: _GIVEN for c in _COUNTS}, "accuracy": _NULL, "correct": _NULL}},
    {"title": "an auditing accuracy: accuracy or correct (at most trials), out of trials",
     "required": ["trials"],
     "properties": {**{c: _NULL for c in _COUNTS}, "trials": _GIVEN},
     "oneOf": [{"required": ["accuracy"], "properties": {"accuracy": _GIVEN, "correct": _NULL}},
               {"required": ["correct"], "properties": {"correct": _GIVEN, "accuracy": _NULL}}]},
]}


class CalibrateRequest(_Body):
    model_config = ConfigDict(extra="forbid", json_schema_extra=CALIBRATE_VARIANTS)

    mechanism: Literal["clip-softmax", "gaussian"]
    solve_for: Literal["temperature", "clip", "batch-size", "batch_size", "sigma"]
    target_epsilon: Annotated[float, Field(gt=0, allow_inf_nan=False, json_schema_extra={"minimum": MIN_EPSILON})]
    delta: Delta
    compositions: Annotated[int, Field(ge=1)] | None = Field(
        None, description="releases composed: sequences x tokens (required for clip-softmax)"
    )
    temperature: PositiveFloat | None = None
    clip: PositiveFloat | None = None
    batch_size: Annotated[int, Field(ge=1)] | None = None
    sensitivity: PositiveFloat | None = Field(None, description="L2 sensitivity (gaussian; default 1)")
    orders: Orders | None = Field(None, description="'2-99', '2,3,4.5' or a list; default dp-accounting's grid",
                                  json_schema_extra=ORDERS_SCHEMA)
    adjacency: AdjacencyName = "add-remove"
    method: Literal["analytic", "rdp", "classical"] | None = Field(None, description="gaussian only")
    conversion: Conversion = "best"
    lower: PositiveFloat | None = Field(None, description="search lower bound for the solved parameter")
    upper: PositiveFloat | None = Field(None, description="search upper bound for the solved parameter")


class ConvertRequest(_Body):
    model_config = ConfigDict(extra="forbid", json_schema_extra=CONVERT_VARIANTS)

    rdp: list[Annotated[float, Field(ge=0)]] | None = Field(
        None, description="RDP curve, one value per order (may be +inf only via the library)"
    )
    orders: Orders | None = Field(None, json_schema_extra=ORDERS_SCHEMA)
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
    model_config = ConfigDict(extra="forbid", json_schema_extra=EMPIRICAL_VARIANTS)

    tp: Annotated[int, Field(ge=0)] | None = None
    fn: Annotated[int, Field(ge=0)] | None = None
    fp: Annotated[int, Field(ge=0)] | None = None
    tn: Annotated[int, Field(ge=0)] | None = None
    trials: Annotated[int, Field(ge=1)] | None = None
    accuracy: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    correct: Annotated[int, Field(ge=0)] | None = None
    confidence: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = 0.95
    delta: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = 0.0
