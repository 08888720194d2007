"""Request models of the privacy-math operations, shared by the HTTP routes, the CLI's JSON
and the ``epsilon`` audit kind (pydantic only: no FastAPI, no SQL)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict, JsonValue

from app.jsonbody import JSONBody
from app.privacy._validate import MAX_COUNT, MIN_EPSILON

# Finite numbers only: NaN / Infinity in a body are 422, never a 500.
Finite = Annotated[float, Field(allow_inf_nan=False)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Delta = Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)]
# Counts: at most 2**53 - 1 (app.privacy._validate.MAX_COUNT; a JSON integer has no size of its own).
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
PositiveCount = Annotated[int, Field(ge=1, le=MAX_COUNT)]
Orders = str | list[Finite]
# What the schema says of an order grid (app.privacy.rdp.parse_orders checks it, 422 naming `orders`): a spec
# ("2-99", "2,3,4.5", "2-10,12.5,20-30") or a list of orders, each > 1.
ORDERS_SCHEMA: JsonDict = {"anyOf": [
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
_NULL: JsonDict = {"type": "null"}
_GIVEN: JsonDict = {"not": _NULL}
_TARGET: JsonDict = {"type": "number", "minimum": MIN_EPSILON}  # app.privacy._validate.target_epsilon


def _clip_softmax(solve: list[JsonValue], others: tuple[str, str]) -> JsonDict:
    return {"title": f"clip-softmax, solving for {solve[0]}: the other two of temperature, clip, batch_size given",
            "required": ["mechanism", "solve_for", "compositions", *others],
            "properties": {"mechanism": {"const": "clip-softmax"}, "solve_for": {"enum": solve},
                           "compositions": _GIVEN, **{o: _GIVEN for o in others},
                           "method": _NULL, "sensitivity": _NULL}}


CALIBRATE_VARIANTS: JsonDict = {"oneOf": [
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
_SAME_ADJACENCY: JsonDict = {"anyOf": [
    {"properties": {"adjacency": {"enum": ["add-remove", "unbounded"]},
                    "to_adjacency": {"enum": ["add-remove", "unbounded", None]}}},
    {"required": ["adjacency"], "properties": {"adjacency": {"enum": ["replace-one", "bounded"]},
                                               "to_adjacency": {"enum": ["replace-one", "bounded", None]}}},
]}


def _from(src: str) -> JsonDict:
    props: JsonDict = {src: _GIVEN, **{o: _NULL for o in _SOURCES if o != src}}
    if src != "sigma":
        props["sensitivity"] = _NULL
    out: JsonDict = {
        "title": f"from {src}: delta (to get epsilon) or epsilon (to get delta)",
        "required": [src, "orders"] if src == "rdp" else [src],
        "properties": {**props, **({"orders": _GIVEN} if src == "rdp" else {})},
        "oneOf": [
            {"required": ["delta"], "properties": {"delta": _GIVEN, "epsilon": _NULL, "to": {"enum": ["epsilon", None]}}},
            {"required": ["epsilon"], "properties": {"epsilon": _GIVEN, "delta": _NULL, "to": {"enum": ["delta", None]}}},
        ],
    }
    if src == "rdp":
        out["allOf"] = [_SAME_ADJACENCY]
    return out


CONVERT_VARIANTS: JsonDict = {"oneOf": [
    *(_from(src) for src in _SOURCES),
    {"title": "back: (epsilon, delta) to the largest GDP mu or zCDP rho that implies it",
     "required": ["to", "epsilon", "delta"],
     "properties": {**{o: _NULL for o in _SOURCES}, "sensitivity": _NULL, "to": {"enum": ["mu", "rho"]},
                    "epsilon": _TARGET, "delta": _GIVEN, "count": {"const": 1}},
     "allOf": [_SAME_ADJACENCY]},
]}

_COUNTS = ("tp", "fn", "fp", "tn")
EMPIRICAL_VARIANTS: JsonDict = {"oneOf": [
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
    compositions: PositiveCount | None = Field(
        None, description="releases composed: sequences x tokens (required for clip-softmax)"
    )
    temperature: PositiveFloat | None = None
    clip: PositiveFloat | None = None
    batch_size: PositiveCount | None = None
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
    count: PositiveCount = 1
    delta: Delta | None = None
    epsilon: NonNegFloat | None = None
    to: Literal["epsilon", "delta", "mu", "rho"] | None = None
    adjacency: AdjacencyName = "add-remove"
    to_adjacency: AdjacencyName | None = None
    conversion: Conversion = "best"


class EmpiricalRequest(_Body):
    model_config = ConfigDict(extra="forbid", json_schema_extra=EMPIRICAL_VARIANTS)

    tp: Count | None = None
    fn: Count | None = None
    fp: Count | None = None
    tn: Count | None = None
    trials: PositiveCount | None = None
    accuracy: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    correct: Count | None = None
    confidence: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = 0.95
    delta: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = 0.0


def check_variants(body: _Body) -> None:
    """The rules the variants above state, checked on a parsed body without the math (the ``epsilon`` job
    kind runs this at submission; the service checks the same, and more, when it computes). Raises
    PrivacyInputError naming the field."""
    from app.privacy.adjacency import Adjacency
    from app.privacy.errors import PrivacyInputError as Bad
    from app.privacy.rdp import parse_orders

    orders = getattr(body, "orders", None)
    if orders is not None:
        parse_orders(orders)
    if isinstance(body, CalibrateRequest):
        solve = body.solve_for.replace("_", "-")
        if body.target_epsilon < MIN_EPSILON:
            raise Bad(f"must be >= {MIN_EPSILON:g}", param="target_epsilon")
        if body.mechanism == "gaussian":
            if solve != "sigma":
                raise Bad("the gaussian mechanism solves for sigma", param="solve_for")
            for name in ("temperature", "clip", "batch_size"):
                if getattr(body, name) is not None:
                    raise Bad(f"{name} applies to clip-softmax, not gaussian", param=name)
            if orders is not None and body.method != "rdp":
                raise Bad("orders apply to method rdp only", param="orders")
            return
        if solve not in ("temperature", "clip", "batch-size"):
            raise Bad("clip-softmax solves for temperature, clip or batch_size", param="solve_for")
        for name in ("compositions", "temperature", "clip", "batch_size"):
            if name.replace("_", "-") != solve and getattr(body, name) is None:
                raise Bad(f"{name} is required when solving for {solve} with clip-softmax", param=name)
        for name in ("method", "sensitivity"):
            if getattr(body, name) is not None:
                raise Bad(f"{name} applies to the gaussian mechanism", param=name)
    elif isinstance(body, ConvertRequest):
        sources = [n for n in _SOURCES if getattr(body, n) is not None]
        if len(sources) > 1:
            raise Bad(f"give exactly one of rdp, rho, pure_epsilon, mu, sigma (got {', '.join(sources)})", param="source")
        if body.sensitivity is not None and body.sigma is None:
            raise Bad("sensitivity goes with sigma", param="sensitivity")
        same = body.to_adjacency is None or Adjacency.parse(body.to_adjacency) == Adjacency.parse(body.adjacency)
        if not sources:
            if body.to not in ("mu", "rho"):
                raise Bad("give a source (rdp, rho, pure_epsilon, mu or sigma), or epsilon, delta and to=mu|rho",
                          param="source")
            if body.epsilon is None or body.delta is None:
                raise Bad("epsilon and delta are both required", param="epsilon" if body.epsilon is None else "delta")
            if body.epsilon < MIN_EPSILON:
                raise Bad(f"must be >= {MIN_EPSILON:g}", param="epsilon")
            if body.count != 1:
                raise Bad("count applies to a source guarantee", param="count")
            if not same:
                raise Bad("adjacency translation needs a source guarantee", param="to_adjacency")
            return
        if body.to in ("mu", "rho"):
            raise Bad("to=mu|rho takes epsilon and delta without a source", param="to")
        if (body.delta is None) == (body.epsilon is None):
            raise Bad("give exactly one of delta (to get epsilon) or epsilon (to get delta)", param="delta")
        if (body.to == "epsilon" and body.delta is None) or (body.to == "delta" and body.epsilon is None):
            raise Bad(f"to={body.to} needs {'delta' if body.to == 'epsilon' else 'epsilon'}",
                      param="delta" if body.to == "epsilon" else "epsilon")
        if sources == ["rdp"]:
            if orders is None:
                raise Bad("an RDP curve needs its orders", param="orders")
            if not same:
                raise Bad("adjacency translation of an RDP curve is not supported", param="to_adjacency")
    elif isinstance(body, EmpiricalRequest):
        counts = [getattr(body, c) for c in _COUNTS]
        accuracy = body.accuracy is not None or body.correct is not None
        if any(c is not None for c in counts):
            if accuracy:
                raise Bad("give either the counts (tp, fn, fp, tn) or an accuracy, not both", param="accuracy")
            for name, c in zip(_COUNTS, counts):
                if c is None:
                    raise Bad("all four counts tp, fn, fp, tn are required", param=name)
            return
        if not accuracy:
            raise Bad("give the counts (tp, fn, fp, tn) or accuracy and trials", param="tp")
        if body.trials is None:
            raise Bad("trials is required with accuracy", param="trials")
        if body.accuracy is not None and body.correct is not None:
            raise Bad("give accuracy or correct, not both", param="correct")
