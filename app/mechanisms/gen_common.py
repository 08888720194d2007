"""Shared parts of the private generation mechanisms (ESA, KSA, clip-softmax, PoE decoding).

* :class:`GenerationRequest`: what every generation mechanism is asked (exemplars,
  query, budget, adjacency, token limit, template, mechanism parameters);
* :class:`GenerationResult`: the released text, the privacy cost (the
  ``PrivacyCost.to_dict()`` shape of the classification mechanisms, plus
  ``is_private``) and the internals a white-box audit reads;
* prompt building (chat template when the model has one, plain few-shot text
  otherwise) and the data-independent partitioning of exemplars into units.

Exemplar text never goes into a result: internals hold exemplar *indices*,
embeddings and numbers, never the private strings. (Member answers of ESA/KSA
are derived from private text and are not put in internals either.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, overload

import numpy as np

from app.mechanisms.errors import MechanismParamError
from app.privacy.adjacency import Adjacency

if TYPE_CHECKING:
    from app.llm.types import LanguageModel

Exemplar = tuple[str, str]  # (input, output)

DEFAULT_INSTRUCTION = "Answer the question."


# ---------------------------------------------------------------------------
# Request / result
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptTemplate:
    """The dataset's template (``instruction``, ``input_prefix``, ``output_prefix``)."""

    instruction: str = DEFAULT_INSTRUCTION
    input_prefix: str = "Input:"
    output_prefix: str = "Output:"

    @classmethod
    def from_any(cls, t: "PromptTemplate | Mapping[str, Any] | None") -> "PromptTemplate":
        if t is None:
            return cls()
        if isinstance(t, PromptTemplate):
            return t
        if isinstance(t, Mapping):
            return cls(
                instruction=str(t.get("instruction") or DEFAULT_INSTRUCTION),
                input_prefix=str(t.get("input_prefix") or ""),
                output_prefix=str(t.get("output_prefix") or ""),
            )
        raise MechanismParamError("template must be a mapping with instruction/input_prefix/output_prefix", param="template")


@dataclass(frozen=True)
class GenerationRequest:
    exemplars: tuple[Exemplar, ...]
    query: str
    epsilon: float | None = None
    delta: float = 1e-5
    adjacency: str = "replace-one"
    max_tokens: int = 32
    template: PromptTemplate = field(default_factory=PromptTemplate)
    params: Mapping[str, Any] = field(default_factory=dict)
    generation_seed: int | None = None  # seeds the model's own sampling (members, candidates)

    @classmethod
    def build(
        cls,
        exemplars: Sequence[Any],
        query: str,
        *,
        epsilon: float | None = None,
        delta: float = 1e-5,
        adjacency: str = "replace-one",
        max_tokens: int = 32,
        template: Any = None,
        params: Mapping[str, Any] | None = None,
        generation_seed: int | None = None,
    ) -> "GenerationRequest":
        ex = normalize_pairs(exemplars)
        if not isinstance(query, str) or not query.strip():
            raise MechanismParamError("must be a non-empty string", param="query")
        if not isinstance(max_tokens, (int, np.integer)) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise MechanismParamError(f"must be an integer >= 1, got {max_tokens!r}", param="max_tokens")
        if epsilon is not None:
            epsilon = check_positive(epsilon, "epsilon")
        d = float(delta)
        if not (0.0 <= d < 1.0) or not math.isfinite(d):
            raise MechanismParamError(f"must be in [0, 1), got {delta!r}", param="delta")
        adj = parse_adjacency(adjacency)
        if params is not None and not isinstance(params, Mapping):
            raise MechanismParamError("must be an object of mechanism parameters", param="params")
        return cls(tuple(ex), query, epsilon, d, adj.value, int(max_tokens), PromptTemplate.from_any(template),
                   dict(params or {}), generation_seed)


@dataclass(frozen=True)
class GenerationResult:
    """A released text and what it cost.

    ``privacy`` is ``PrivacyCost.to_dict()`` plus ``is_private`` (epsilon None on a
    non-private baseline). ``internals`` is for white-box audits; the API decides
    who sees it. ``finish_reason``: "stop" (EOS / stop string) or "length".
    """

    text: str
    mechanism: str
    privacy: dict[str, Any]
    internals: dict[str, Any] = field(default_factory=dict)
    finish_reason: str = "length"
    tokens: int = 0

    def to_dict(self, include_internals: bool = True) -> dict[str, Any]:
        d = {
            "text": self.text,
            "mechanism": self.mechanism,
            "privacy": jsonable(self.privacy),
            "finish_reason": self.finish_reason,
            "tokens": self.tokens,
        }
        if include_internals:
            d["internals"] = jsonable(self.internals)
        return d


def jsonable(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        f = float(x)
        return f if math.isfinite(f) else None
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.bool_,)):
        return bool(x)
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    return x


# ---------------------------------------------------------------------------
# Validation helpers (errors name the field as the HTTP body spells it)
# ---------------------------------------------------------------------------


def parse_adjacency(value: Any) -> Adjacency:
    from app.privacy.errors import PrivacyInputError

    try:
        return Adjacency.parse(value, param="adjacency")
    except PrivacyInputError as exc:
        raise MechanismParamError(exc.message, param="adjacency") from None


def check_positive(value: Any, param: str, *, upper: float | None = None) -> float:
    if isinstance(value, bool):
        raise MechanismParamError(f"must be a number, got {value!r}", param=param)
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise MechanismParamError(f"must be a number, got {value!r}", param=param) from None
    if not math.isfinite(x) or x <= 0.0:
        raise MechanismParamError(f"must be a finite number > 0, got {value!r}", param=param)
    if upper is not None and x > upper:
        raise MechanismParamError(f"must be <= {upper:g}, got {x:g}", param=param)
    return x


def check_fraction(value: Any, param: str) -> float:
    x = check_positive(value, param)
    if x >= 1.0:
        raise MechanismParamError(f"must be in (0, 1), got {x:g}", param=param)
    return x


def check_count(value: Any, param: str, *, minimum: int = 1, maximum: int | None = None) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise MechanismParamError(f"must be an integer, got {value!r}", param=param)
    v = int(value)
    if v < minimum:
        raise MechanismParamError(f"must be >= {minimum}, got {v}", param=param)
    if maximum is not None and v > maximum:
        raise MechanismParamError(f"must be <= {maximum}, got {v}", param=param)
    return v


class Params:
    """Reads a mechanism's ``params`` mapping: typed getters with defaults; unknown keys are
    refused by :meth:`done` (field names are reported as ``params.<name>``)."""

    def __init__(self, raw: Mapping[str, Any], known: Sequence[str]):
        self._raw = dict(raw or {})
        self._known = set(known)
        for key in self._raw:
            if key not in self._known:
                raise MechanismParamError(
                    f"unknown parameter; known: {', '.join(sorted(self._known))}", param=f"params.{key}"
                )

    def get(self, name: str, default: Any = None) -> Any:
        v = self._raw.get(name)
        return default if v is None else v

    def given(self, name: str) -> bool:
        return self._raw.get(name) is not None

    @overload
    def positive(self, name: str, default: float, upper: float | None = None) -> float: ...

    @overload
    def positive(self, name: str, default: None, upper: float | None = None) -> float | None: ...

    def positive(self, name: str, default: float | None, upper: float | None = None) -> float | None:
        v = self.get(name, default)
        return None if v is None else check_positive(v, f"params.{name}", upper=upper)

    def given_positive(self, name: str, upper: float | None = None) -> float:
        """:meth:`positive` of a parameter the caller has checked is :meth:`given` (no default)."""
        v = self.positive(name, None, upper)
        if v is None:
            raise MechanismParamError("is required here", param=f"params.{name}")
        return v

    def fraction(self, name: str, default: float) -> float:
        return check_fraction(self.get(name, default), f"params.{name}")

    @overload
    def count(self, name: str, default: int, minimum: int = 1, maximum: int | None = None) -> int: ...

    @overload
    def count(self, name: str, default: None, minimum: int = 1, maximum: int | None = None) -> int | None: ...

    def count(self, name: str, default: int | None, minimum: int = 1, maximum: int | None = None) -> int | None:
        v = self.get(name, default)
        return None if v is None else check_count(v, f"params.{name}", minimum=minimum, maximum=maximum)

    def choice(self, name: str, default: str, choices: Sequence[str]) -> str:
        v = str(self.get(name, default)).strip().lower()
        if v not in choices:
            raise MechanismParamError(f"must be one of {', '.join(choices)}; got {v!r}", param=f"params.{name}")
        return v

    def nonnegative(self, name: str, default: float) -> float:
        v = self.get(name, default)
        if isinstance(v, bool):
            raise MechanismParamError(f"must be a number, got {v!r}", param=f"params.{name}")
        try:
            x = float(v)
        except (TypeError, ValueError):
            raise MechanismParamError(f"must be a number, got {v!r}", param=f"params.{name}") from None
        if not math.isfinite(x) or x < 0:
            raise MechanismParamError(f"must be a finite number >= 0, got {v!r}", param=f"params.{name}")
        return x


def normalize_pairs(exemplars: Sequence[Any]) -> list[Exemplar]:
    out: list[Exemplar] = []
    for i, e in enumerate(exemplars):
        if isinstance(e, Mapping):
            a, b = e.get("input"), e.get("output")
        elif isinstance(e, (tuple, list)) and len(e) == 2:
            a, b = e
        else:
            a, b = getattr(e, "input", None), getattr(e, "output", None)
        if not isinstance(a, str) or not isinstance(b, str):
            raise MechanismParamError(f"exemplar {i} must be an (input, output) pair of strings", param=f"exemplars.{i}")
        out.append((a, b))
    return out


def require_private(req: GenerationRequest, mechanism: str) -> float:
    """The request's epsilon; a private mechanism needs one."""
    if req.epsilon is None:
        raise MechanismParamError(f"mechanism {mechanism!r} needs a privacy budget epsilon > 0", param="epsilon")
    return req.epsilon


def require_delta(req: GenerationRequest, mechanism: str) -> float:
    if req.delta <= 0.0:
        raise MechanismParamError(f"mechanism {mechanism!r} is (epsilon, delta)-DP: delta must be > 0", param="delta")
    return req.delta


# ---------------------------------------------------------------------------
# Partitioning (data independent)
# ---------------------------------------------------------------------------


def partition(n: int, units: int, per_unit: int, rng: np.random.Generator) -> list[list[int]]:
    """``units`` disjoint groups of ``per_unit`` exemplar indices, by a uniformly random
    permutation drawn from ``rng`` (independent of the exemplars' content; the coupling
    argument is in ``app.mechanisms.sensitivity``). Indices inside a unit keep the permutation
    order."""
    if units * per_unit > n:
        raise MechanismParamError(
            f"units x exemplars per unit = {units} x {per_unit} = {units * per_unit} exceeds the {n} exemplars",
            param="params.partitions",
        )
    perm = rng.permutation(n)
    return [[int(i) for i in perm[u * per_unit:(u + 1) * per_unit]] for u in range(units)]


def resolve_units(n: int, units: int | None, per_unit: int | None, default_units: int, default_per_unit: int,
                  units_param: str = "partitions", per_unit_param: str = "shots_per_partition", *,
                  adjacency: Adjacency | str) -> tuple[int, int]:
    """Fill in unit count / size (errors name the HTTP field).

    Replace-one: n is the same for both neighbours, so the defaults may follow it (count
    ``min(default_units, n)``, size ``min(default_per_unit, n // count)``, at least 1).

    Add/remove: n is private and differs between neighbours. A size taken from n would differ
    too (ESA's 8 x 4 defaults: n = 15 gives 8 x 1, n = 16 gives 8 x 2), and then every unit
    changes, where the analyses (``app.mechanisms.sensitivity``) let one exemplar change one unit.
    So the size default is the constant ``default_per_unit``, refused when the units do not fit
    (the caller must set ``per_unit_param``). The count default still follows n, but a count
    change then only happens at size 1 with every exemplar a unit (with a size >= 2 the count is
    either ``default_units`` or refused), the added-member case every caller's analysis covers.
    """
    if n < 1:
        raise MechanismParamError("the dataset has no exemplars", param="dataset_id")
    u = units if units is not None else min(default_units, n)
    if u > n:
        raise MechanismParamError(f"{u} units need at least {u} exemplars, the dataset has {n}", param=f"params.{units_param}")
    # Under add-remove an unset size is the constant default, never one that follows n (docstring).
    fixed = per_unit is None and parse_adjacency(adjacency) == Adjacency.ADD_REMOVE
    k = (per_unit if per_unit is not None else default_per_unit if fixed
         else max(1, min(default_per_unit, n // u)))
    if u * k > n:
        why = (f": under add-remove adjacency the default {per_unit_param} = {k} is not fitted to the private "
               f"exemplar count (a size that follows n differs between neighbouring datasets and changes every "
               f"unit); set params.{per_unit_param} explicitly") if fixed else ""
        raise MechanismParamError(f"{u} x {k} = {u * k} exemplars needed, the dataset has {n}{why}",
                                  param=f"params.{per_unit_param}")
    return u, k


# ---------------------------------------------------------------------------
# Prompts
# ---------------------------------------------------------------------------


def _user_text(template: PromptTemplate, text: str) -> str:
    return f"{template.input_prefix} {text}".strip() if template.input_prefix else text


def uses_chat(lm: LanguageModel) -> bool:
    try:
        return bool(lm.capabilities().chat_template)
    except Exception:  # a test double without capabilities
        return hasattr(lm, "apply_chat_template")


def build_prompt(
    lm: LanguageModel,
    template: PromptTemplate,
    shots: Sequence[Exemplar],
    query: str,
    *,
    extra_instruction: str | None = None,
) -> str:
    """Few-shot prompt: with a chat template, a system turn (instruction), one user/assistant
    pair per shot, then the query as the last user turn; otherwise plain text
    ``instruction / input_prefix x / output_prefix y`` blocks ending in ``output_prefix``."""
    instruction = template.instruction
    if extra_instruction:
        instruction = f"{instruction} {extra_instruction}"
    if uses_chat(lm):
        msgs: list[dict[str, str]] = [{"role": "system", "content": instruction}]
        for x, y in shots:
            msgs.append({"role": "user", "content": _user_text(template, x)})
            msgs.append({"role": "assistant", "content": y})
        msgs.append({"role": "user", "content": _user_text(template, query)})
        return lm.apply_chat_template(msgs, add_generation_prompt=True)
    out_p = template.output_prefix or "Output:"
    in_p = template.input_prefix or "Input:"
    blocks = [instruction, ""]
    for x, y in shots:
        blocks.append(f"{in_p} {x}\n{out_p} {y}\n")
    blocks.append(f"{in_p} {query}\n{out_p}")
    return "\n".join(blocks)


def stop_strings(lm: LanguageModel) -> list[str] | None:
    """Plain-text prompts end an answer at the next line; chat prompts end at EOS."""
    return None if uses_chat(lm) else ["\n"]


def clean_answer(text: str) -> str:
    return text.strip()


# ---------------------------------------------------------------------------
# Calibration helper
# ---------------------------------------------------------------------------


def largest_feasible(f: Callable[[float], float], target: float, lo: float, hi: float, iters: int = 80) -> float:
    """Largest x in [lo, hi] with f(x) <= target, for f non-decreasing (bisection that keeps the
    feasible end, as ``app.privacy.calibration`` does). Raises when f(lo) > target."""
    if f(lo) > target:
        raise MechanismParamError("the privacy budget is too small for these parameters", param="epsilon")
    if f(hi) <= target:
        return hi
    a, b = lo, hi
    for _ in range(iters):
        m = math.sqrt(a) * math.sqrt(b) if a > 0 else 0.5 * (a + b)  # no underflow of a * b
        if f(m) <= target:
            a = m
        else:
            b = m
        if b - a <= 1e-12 * b:
            break
    return a


def model_seed(rng: np.random.Generator) -> int:
    """A seed for the model's own sampler, drawn from the mechanism's generator."""
    return int(rng.integers(0, 2**62))
