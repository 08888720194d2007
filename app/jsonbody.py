"""Request bodies whose JSON types mean what the OpenAPI document says (pydantic only).

Pydantic's lax mode turns ``true`` into 1.0 and ``"5"`` into 5; the schema of a
number field says ``"type": "number"``, so a client (or a schema fuzzer) sending a
boolean or a string there must get a 422. Strict mode would also refuse ``8.0``
for an integer field, which JSON Schema counts as an integer. ``JSONBody`` keeps
lax mode and refuses only the cross-type coercions: a boolean where the field
takes no boolean, a string where it takes no string (top level and list items).

It is also where every string of a body is checked for NUL and lone surrogates
(``app.badtext``), before any field is validated: a ``BadTextError`` naming the
dotted field, which the API answers 422 (``app.api.input_guard``).
"""

from __future__ import annotations

import json
import sys
import types
import typing
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, model_validator

from app.badtext import INVISIBLE_ONLY, VISIBLE_PATTERN, check_text, has_visible

_NONE = type(None)


def _scalars(tp: Any) -> set[type]:
    """The JSON scalar kinds an annotation admits: among bool, int, float, str; Any admits all."""
    if tp is Any:
        return {bool, int, float, str}
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _scalars(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        out: set[type] = set()
        for a in typing.get_args(tp):
            out |= _scalars(a)
        return out
    if origin is typing.Literal:
        return {type(v) for v in typing.get_args(tp)}
    if tp in (bool, int, float, str):
        return {tp}
    if isinstance(tp, type) and issubclass(tp, str):  # str enums
        return {str}
    return {bool, int, float, str} if origin is None and not isinstance(tp, type) else set()


def _items(tp: Any) -> Any | None:
    """The item annotation of a list field (through Optional / Annotated), else None."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _items(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        found = [i for i in (_items(a) for a in typing.get_args(tp) if a is not _NONE) if i is not None]
        return found[0] if len(found) == 1 else None
    if origin in (list, tuple, set) and typing.get_args(tp):
        return typing.get_args(tp)[0]
    return None


def _check(name: str, tp: Any, value: Any) -> None:
    if isinstance(value, (bool, str)):
        kinds = _scalars(tp)
        numeric = kinds & {int, float}
        if isinstance(value, bool) and bool not in kinds and numeric:
            raise ValueError(f"{name}: must be a {'number' if float in kinds else 'integer'}, not a boolean")
        if isinstance(value, str) and str not in kinds and numeric:
            raise ValueError(f"{name}: must be a {'number' if float in kinds else 'integer'}, not a string")
        if not isinstance(value, bool) and kinds == {bool}:
            raise ValueError(f"{name}: must be true or false")
    elif isinstance(value, (int, float)) and _scalars(tp) == {bool}:
        raise ValueError(f"{name}: must be true or false")
    elif isinstance(value, list):
        item = _items(tp)
        if item is not None:
            for i, v in enumerate(value):
                _check(f"{name}.{i}", item, v)


def _visible(v: str) -> str:
    if not has_visible(v):
        raise ValueError(INVISIBLE_ONLY)
    return v


# An identifying text field (a label, a dataset name): a 422 naming it when it holds nothing visible ("\u200b",
# "  \ufeff"). The pattern is published for clients and fuzzers; the check is the validator's (its message names
# the rule, where pydantic's would quote a 160-character pattern).
VisibleText = Annotated[str, Field(json_schema_extra={"pattern": VISIBLE_PATTERN}), AfterValidator(_visible)]


class JSONBody(BaseModel):
    @model_validator(mode="before")
    @classmethod
    def _json_types(cls, data: Any) -> Any:
        # The whole raw body, nested dicts (free-form configs) included: the outermost model
        # validates first, so the error names the full path (exemplars.3.input).
        check_text(data)
        if isinstance(data, dict):
            for name, f in cls.model_fields.items():
                key = f.alias or name
                if key in data:
                    _check(key, f.annotation, data[key])
        return data


# --- duplicate keys and non-finite numbers ------------------------------------------------------------------
# json.loads keeps the last of two equal keys ({"epsilon": 1, "epsilon": 100} is epsilon 100), while a proxy or a
# WAF in front may read the first: the two would see different requests. It also reads NaN / Infinity (not JSON)
# and makes 1e999 inf. Every JSON body the service parses goes through ``loads`` below (FastAPI's bodies via
# app.api.json_route, the upload route, its JSONL lines, the /ui audit config), which refuses both. The hooks are
# C json's object_pairs_hook and parse_float: +3.4 us on a 590-byte answer body (~1.55x json.loads), within the
# noise of a whole in-process FastAPI request (~150 us +- 10%; benchmarks/bench_json_dupkeys.py); the offending
# value's path is looked for only on the error.


class BodyValueError(Exception):
    """A JSON body holds what the service refuses before any field is validated; ``param`` is the dotted path
    (``epsilon``, ``config.trials``, ``exemplars.3.input``). Not a ValueError: callers that map ValueError to
    "not valid JSON" keep these apart."""

    code = "invalid_value"
    reason = "not accepted"

    def __init__(self, param: str) -> None:
        super().__init__(f"{param}: {self.reason}")
        self.param = param

    def prefixed(self, prefix: str) -> "BodyValueError":
        return type(self)(f"{prefix}{self.param}")


class DuplicateKeyError(BodyValueError):
    code = "duplicate_key"
    reason = "the key appears more than once in a JSON object"


class NonFiniteNumberError(BodyValueError):
    # Python's json reads NaN, Infinity and -Infinity (not JSON) and turns 1e999 into inf: a free-form value
    # (a job's config, simulated votes) kept one, and the response that echoed it could not be rendered (a 500
    # after the job was stored).
    code = "invalid_value"
    reason = "not a finite number (NaN, Infinity and numbers beyond 1.8e308 are not accepted)"


class LongIntegerError(BodyValueError):
    # Python's int() refuses a decimal text over sys.get_int_max_str_digits() (4300) digits with a plain
    # ValueError, which routes that catch only JSONDecodeError turned into a 500 (the JSONL upload, the /ui
    # audit form). Such a number is far beyond 1.8e308, so no field could accept it anyway.
    code = "invalid_value"
    reason = f"a number with more than {sys.get_int_max_str_digits()} digits is not accepted"


class _Repeated(Exception):
    pass


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise _Repeated
    return d


class _Pairs(list[tuple[str, Any]]):
    pass


class _Bad(Exception):
    pass


_BAD = object()  # a non-finite number, as the locating parse marks it
_LONG = object()  # an integer over the interpreter's digit limit, likewise


def _marked_int(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        return _LONG


def _finite(text: str) -> float:
    v = float(text)
    if v - v != 0.0:  # inf or nan (cheaper than math.isfinite's call)
        raise _Bad
    return v


def _constant(_name: str) -> float:  # NaN, Infinity, -Infinity
    raise _Bad


def _marked(text: str) -> Any:
    v = float(text)
    return v if v - v == 0.0 else _BAD


def _locate(raw: str | bytes) -> BodyValueError:
    """The first repeated key or non-finite number in document order, with its dotted path (error path only;
    iterative)."""
    tree = json.loads(raw, object_pairs_hook=_Pairs, parse_float=_marked, parse_int=_marked_int,
                      parse_constant=lambda _n: _BAD)
    stack: list[tuple[Any, str]] = [(tree, "")]
    while stack:
        node, where = stack.pop()
        if node is _BAD:
            return NonFiniteNumberError(where or "body")
        if node is _LONG:
            return LongIntegerError(where or "body")
        if isinstance(node, _Pairs):
            seen: set[str] = set()
            for k, _ in node:
                if k in seen:
                    return DuplicateKeyError(f"{where}.{k}" if where else k)
                seen.add(k)
            stack.extend((v, f"{where}.{k}" if where else k) for k, v in reversed(node))
        elif isinstance(node, list):
            stack.extend((v, f"{where}.{i}" if where else str(i)) for i, v in reversed(list(enumerate(node))))
    return BodyValueError("body")  # not reached


def loads(raw: str | bytes) -> Any:
    """``json.loads`` that refuses a repeated key in any object and a non-finite number (NaN, Infinity, 1e999)
    anywhere, and an integer too long for int() (over 4300 digits): a BodyValueError naming the first in
    document order. Its other errors are json.loads' own (JSONDecodeError, UnicodeDecodeError, RecursionError)."""
    try:
        return json.loads(raw, object_pairs_hook=_unique, parse_float=_finite, parse_constant=_constant)
    except (_Repeated, _Bad):
        raise _locate(raw) from None
    except ValueError as exc:
        if isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
            raise
        raise _locate(raw) from None  # int()'s digit limit: the only other ValueError json.loads raises
