"""The mechanism interface, the result object and the registry.

    mech = get_mechanism("rnm")
    res = mech.classify(lm, exemplars, query, labels, params={"epsilon": 2.0})
    res.label, res.privacy["epsilon"], res.internals["noisy_votes"]

A mechanism is stateless; ``params`` is a mapping or the mechanism's params
dataclass (validated, errors name the field); ``rng`` defaults to a generator
seeded from the OS's secure source (``app.mechanisms.rng``).
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Self, Sequence, TypeAlias

import numpy as np
import numpy.typing as npt

from app.icl.templates import ExemplarPairs
from app.mechanisms.aggregate import FloatArray, IntArray
from app.mechanisms.errors import MechanismParamError, UnknownMechanismError
from app.privacy.accountant import PrivacyCost

if TYPE_CHECKING:
    from app.llm.types import LanguageModel

Exemplar = tuple[str, str]  # (input text, label)


@dataclass(frozen=True)
class ClassificationResult:
    """What a mechanism released and what it cost.

    ``privacy`` is ``PrivacyCost.to_dict()`` (epsilon, delta, adjacency, mechanism,
    params, RDP curve, rho; epsilon None = no guarantee) plus ``is_private``.
    ``internals`` holds everything a white-box audit reads (clean votes, noisy
    votes, clipped utility sums, partitions as exemplar indices); the API decides
    what a caller may see. ``distribution`` is the exact law of the released label
    given the internals (None where no closed form is computed).
    """

    label: str
    label_index: int
    mechanism: str
    privacy: dict[str, Any]
    internals: dict[str, Any] = field(default_factory=dict)
    distribution: dict[str, float] | None = None

    def privacy_cost(self) -> PrivacyCost:
        return PrivacyCost.from_dict(self.privacy)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "label_index": self.label_index,
            "mechanism": self.mechanism,
            "privacy": self.privacy,
            "internals": _jsonable(self.internals),
            "distribution": self.distribution,
        }


def _jsonable(x: Any) -> Any:
    t = type(x)
    # Exact built-in scalars first (every vote, index and probability of an answer's internals): what the
    # general checks below return for them, without their ABC isinstance tests (``Mapping``).
    if t is int or t is str or t is bool or x is None:
        return x
    if t is float:
        return x if math.isfinite(x) else None
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        f = float(x)
        return f if math.isfinite(f) else None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def non_private_cost(mechanism: str, params: Mapping[str, Any]) -> dict[str, Any]:
    d = PrivacyCost(math.inf, 0.0, "add-remove", mechanism, dict(params)).to_dict()
    d["is_private"] = False  # epsilon None: no guarantee
    d["reads_exemplars"] = True
    return d


# ---------------------------------------------------------------------------
# Params
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MechanismParams:
    """Base of the params dataclasses: ``from_mapping`` rejects unknown fields by name."""

    @classmethod
    def from_mapping(cls, params: ParamsArg) -> Self:
        if params is None:
            return cls()
        if isinstance(params, cls):
            return params
        if isinstance(params, MechanismParams):
            raise MechanismParamError(f"expected {cls.__name__}, got {type(params).__name__}", param="params")
        if not isinstance(params, Mapping):
            raise MechanismParamError("must be a mapping of parameter names to values", param="params")
        known = {f.name for f in fields(cls)}
        for key in params:
            if key not in known:
                raise MechanismParamError(f"unknown parameter; known: {', '.join(sorted(known))}", param=str(key))
        return cls(**dict(params))

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


ParamsArg: TypeAlias = Mapping[str, Any] | MechanismParams | None
"""What ``params`` may be: a mapping of field names to values, the params dataclass, or None (defaults)."""

IndexUnits: TypeAlias = Sequence[Sequence[int]] | Sequence[npt.NDArray[np.integer[Any]]]
"""Disjoint units (partitions, experts) as exemplar indices: lists or index arrays."""


def check_number(value: Any, param: str, *, lo: float | None = None, lo_open: bool = True, hi: float | None = None) -> float:
    if isinstance(value, bool):
        raise MechanismParamError(f"must be a number, got {value!r}", param=param)
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise MechanismParamError(f"must be a number, got {value!r}", param=param) from None
    if not math.isfinite(x):
        raise MechanismParamError(f"must be finite, got {x}", param=param)
    if lo is not None and (x <= lo if lo_open else x < lo):
        raise MechanismParamError(f"must be {'>' if lo_open else '>='} {lo:g}, got {x:g}", param=param)
    if hi is not None and x >= hi:
        raise MechanismParamError(f"must be < {hi:g}, got {x:g}", param=param)
    return x


def check_int(value: Any, param: str, *, minimum: int = 1, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise MechanismParamError(f"must be an integer, got {value!r}", param=param)
    if int(value) < minimum:
        raise MechanismParamError(f"must be >= {minimum}, got {int(value)}", param=param)
    return int(value)


def check_choice(value: Any, param: str, choices: Sequence[str]) -> str:
    s = str(value).strip().lower()
    if s not in choices:
        raise MechanismParamError(f"must be one of {', '.join(choices)}; got {value!r}", param=param)
    return s


def normalize_exemplars(exemplars: Sequence[Any]) -> list[Exemplar]:
    """(input, label) pairs from tuples, dicts with input/output (or text/label), or objects."""
    if type(exemplars) is ExemplarPairs:  # checked when built (a dataset's cached set): every one is a pair
        return list(exemplars)
    out: list[Exemplar] = []
    for i, e in enumerate(exemplars):
        if type(e) is tuple and len(e) == 2 and type(e[0]) is str and type(e[1]) is str:
            out.append(e)  # already a pair of strings (the cached exemplars): no ABC isinstance checks
            continue
        if isinstance(e, Mapping):
            text, lab = e.get("input", e.get("text")), e.get("output", e.get("label"))
        elif isinstance(e, (tuple, list)) and len(e) == 2:
            text, lab = e
        else:
            text, lab = getattr(e, "input", getattr(e, "text", None)), getattr(e, "output", getattr(e, "label", None))
        if not isinstance(text, str) or not isinstance(lab, str):
            raise MechanismParamError(f"exemplar {i} must be an (input, label) pair of strings", param=f"exemplars.{i}")
        out.append((text, lab))
    return out


def check_labels(labels: Sequence[str]) -> tuple[str, ...]:
    labs = tuple(labels)
    if len(labs) < 2:
        raise MechanismParamError("at least two labels are needed", param="labels")
    if any(not isinstance(x, str) or not x for x in labs):
        raise MechanismParamError("labels must be non-empty strings", param="labels")
    if len(set(labs)) != len(labs):
        raise MechanismParamError("labels must be distinct", param="labels")
    return labs


def check_query(query: Any) -> str:
    if not isinstance(query, str) or not query.strip():
        raise MechanismParamError("must be a non-empty string", param="query")
    return query


def resolve_unit_count(n: int, requested: int | None, per_unit: int, count_param: str, per_unit_param: str) -> int:
    """How many disjoint units (rnm's partitions, poe's experts) of ``per_unit`` exemplars: ``requested``,
    or as many as the n exemplars fill; raises naming the parameter at fault when they do not fit."""
    if n < 1:
        raise MechanismParamError("at least one exemplar is needed", param="exemplars")
    u = requested if requested is not None else n // per_unit
    if u < 1:
        raise MechanismParamError(f"{per_unit_param} = {per_unit} exceeds the {n} exemplars", param=per_unit_param)
    if u * per_unit > n:
        raise MechanismParamError(
            f"{count_param} x {per_unit_param} = {u} x {per_unit} = {u * per_unit} exceeds the {n} exemplars",
            param=count_param,
        )
    return u


def check_label_probs(label_probs: npt.ArrayLike, labels: Sequence[str], units: str) -> FloatArray:
    """The units' label distributions as a (units, K) float array, K = len(labels), at least one unit."""
    probs = np.asarray(label_probs, dtype=float)
    if probs.ndim != 2 or probs.shape[1] != len(labels) or probs.shape[0] < 1:
        raise MechanismParamError(f"label_probs must be ({units}, {len(labels)}), got {probs.shape}", param="label_probs")
    return probs


# ---------------------------------------------------------------------------
# Interface and registry
# ---------------------------------------------------------------------------


class Mechanism(abc.ABC):
    name: ClassVar[str]
    is_private: ClassVar[bool]
    # Whether an answer reads the private exemplars (the service charges what does; zero_shot does not).
    reads_exemplars: ClassVar[bool] = True
    params_type: ClassVar[type[MechanismParams]]

    def parse_params(self, params: ParamsArg) -> MechanismParams:
        return self.params_type.from_mapping(params)

    @abc.abstractmethod
    def cost(self, params: ParamsArg = None, n_exemplars: int | None = None) -> dict[str, Any]:
        """The privacy cost of one answer, known before running (it depends on the params
        and the public exemplar count only): for a budget check before the model call."""

    @abc.abstractmethod
    def classify(
        self,
        lm: LanguageModel,
        exemplars: Sequence[Any],
        query: str,
        labels: Sequence[str],
        template: Any = None,
        params: ParamsArg = None,
        rng: np.random.Generator | None = None,
    ) -> ClassificationResult: ...


class UnitMechanism(Mechanism):
    """``rnm`` (units = partitions) and ``poe`` (units = experts): the exemplars are split into disjoint
    units, one batched model call scores every unit's label distribution (``_icl.classify_by_units``),
    and ``release`` is the private step alone, on those distributions."""

    # Defined by each subclass; Callable rather than abstract signatures since their params types and
    # the name of release's units argument (partitions, experts) differ.
    release: Callable[..., ClassificationResult]
    _draw: Callable[..., tuple[Any, ...]]  # (..., drawn label index or indices): release's draw, vectorised

    @abc.abstractmethod
    def unit_count(self, p: Any, n: int) -> int:
        """How many units n exemplars give under the parsed params ``p`` (raises naming the parameter)."""

    @abc.abstractmethod
    def unit_size(self, p: Any) -> int:
        """Exemplars per unit under the parsed params ``p``."""

    def sample_labels(self, label_probs: npt.ArrayLike, labels: Sequence[str], params: ParamsArg, n_exemplars: int,
                      rng: np.random.Generator | None = None, size: int | None = None) -> IntArray | int:
        """``size`` independent releases (label indices) for the same units' label distributions:
        the code path of ``release``, vectorised (audits, tests)."""
        p = self.parse_params(params)
        drawn: IntArray | int = self._draw(label_probs, check_labels(labels), p, n_exemplars, rng, size)[-1]
        return drawn

    def classify(self, lm: LanguageModel, exemplars: Sequence[Any], query: str, labels: Sequence[str],
                 template: Any = None, params: ParamsArg = None, rng: np.random.Generator | None = None,
                 ) -> ClassificationResult:
        from app.mechanisms import _icl

        p: Any = self.parse_params(params)
        return _icl.classify_by_units(
            lm, exemplars, query, labels, template, rng,
            unit_count=lambda n: self.unit_count(p, n),
            per_unit=self.unit_size(p),
            calibrate=p.calibrate,
            release=lambda probs, labs, n, g, units: self.release(probs, labs, p, n, g, units),
        )


_REGISTRY: dict[str, Mechanism] = {}


def register(mech: Mechanism) -> Mechanism:
    _REGISTRY[mech.name] = mech
    return mech


def get_mechanism(name: str) -> Mechanism:
    key = str(name).strip().lower().replace("_", "-")
    aliases = {"zero-shot": "zero_shot", "zeroshot": "zero_shot", "synthetic-icl": "synthetic_icl", "private-voting": "rnm", "poetry": "poe"}
    key = aliases.get(key, key)
    if key not in _REGISTRY:
        raise UnknownMechanismError(
            f"unknown mechanism {name!r}; known: {', '.join(sorted(_REGISTRY))}", param="mechanism"
        )
    return _REGISTRY[key]


def mechanism_names() -> list[str]:
    return sorted(_REGISTRY)
