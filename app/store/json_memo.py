"""The engines' JSON serializer and deserializer: ``json.dumps`` / ``json.loads``, with the text of long
lists of floats (RDP curves, order grids) remembered (issue 27).

A charge writes and reads RDP curves (~156 floats each; a float's shortest repr is most of
``json.dumps``' time, parsing it most of ``json.loads``'): the entry's curve and the released body's
``privacy.rdp`` / ``privacy.orders`` are the same for every answer with the same parameters, the account's
order grid never changes, and its running sum is read twice per answer (the read transaction, then the
charge's lock). Measured on the tiny-model service path: ~0.55 ms of JSON encoding and ~0.35 ms of
decoding per answer before this.

* ``json_dumps``: the output is exactly ``json.dumps(value)``. A long float list's text is remembered by
  the floats' IEEE bytes, so only bit-identical lists share a text (-0.0 and 0.0, or a list holding an
  int, never do). A dict holding a dict or a long list, and a list holding a long list, down to
  ``_MAX_DEPTH`` levels, is joined from its members' texts with ``json.dumps``' own separators, so a
  curve inside a response body is found too; anything else (deeper, a dict with a non-string key, a
  dict of scalars) is one ``json.dumps`` of the whole.
* ``json_loads``: ``json.loads(text)``; a long text that is a list of numbers is remembered by its text and
  every caller gets a fresh copy (a caller may change its list).
"""

from __future__ import annotations

import json
from array import array
from typing import Any

from app.lru import LRU

_CURVES_SIZE = 64
_CURVES = LRU(_CURVES_SIZE)  # a float list's IEEE bytes -> its json.dumps text
_MIN_CURVE = 32
_MAX_DEPTH = 4

_PARSED_SIZE = 64
_PARSED = LRU(_PARSED_SIZE)  # a number list's text -> its parse (handed out as copies)
_MIN_TEXT = 200  # characters: about 12 floats; shorter texts parse faster than they hash


def _curve_text(value: list) -> str:
    key = array("d", value).tobytes()
    text = _CURVES.get(key)
    if text is None:
        text = json.dumps(value)
        _CURVES.put(key, text)
    return text


def _long(x: Any) -> bool:
    return type(x) is list and len(x) >= _MIN_CURVE


def _dumps(value: Any, depth: int) -> str:
    t = type(value)
    if t is list:
        if len(value) >= _MIN_CURVE and all(type(x) is float for x in value):
            return _curve_text(value)
        if depth < _MAX_DEPTH and any(_long(x) for x in value):  # a list of curves
            return "[" + ", ".join([_dumps(x, depth + 1) for x in value]) + "]"
    elif (t is dict and depth < _MAX_DEPTH and any(type(x) is dict or _long(x) for x in value.values())
          and all(type(k) is str for k in value)):
        return "{" + ", ".join([json.dumps(k) + ": " + _dumps(x, depth + 1) for k, x in value.items()]) + "}"
    return json.dumps(value)


def json_dumps(value: Any) -> str:
    """``json.dumps(value)``, with long float lists' texts remembered (see the module docstring)."""
    return _dumps(value, 0)


def json_loads(text: str | bytes) -> Any:
    """``json.loads(text)``, with long lists of numbers remembered by their text (a fresh copy each time).
    psycopg hands its loader bytes: a long one that opens a list is decoded first (UTF-8, as json.loads
    would), so PostgreSQL's rows are remembered too."""
    if type(text) is bytes and len(text) >= _MIN_TEXT and text[:1] == b"[":
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            return json.loads(text)
    if type(text) is str and len(text) >= _MIN_TEXT and text[0] == "[" and "{" not in text and '"' not in text:
        hit = _PARSED.get(text)
        if hit is not None:
            return list(hit)
        parsed = json.loads(text)
        if type(parsed) is list and all(type(x) in (float, int) or x is None for x in parsed):
            _PARSED.put(text, parsed)
            return list(parsed)
        return parsed
    return json.loads(text)
