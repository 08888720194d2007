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

import types
import typing
from typing import Any

from pydantic import BaseModel, model_validator

from app.badtext import check_text

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
