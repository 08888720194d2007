"""Text no database stores: NUL (U+0000) and lone surrogates (U+D800-U+DFFF). Pure Python.

PostgreSQL refuses a NUL in ``text`` and ``jsonb`` (SQLite stores it), and a lone surrogate
cannot be encoded as UTF-8 at all, so either one reaching a repository is a 500 on one
database or both. Every string that enters the service is checked here once, at the
boundary: JSON bodies (``app.jsonbody.JSONBody``), JSONL upload lines, path and query
parameters (``app.api.input_guard``) and /ui form fields. The messages name the field,
never the text (it may be a private exemplar).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


class BadTextError(Exception):
    """A string holds a NUL or a lone surrogate. Deliberately not a ValueError: raised inside a
    pydantic validator it propagates unchanged (with its dotted ``param``) instead of becoming
    one error among the model's, located at the model rather than at the field."""

    def __init__(self, param: str | None, reason: str) -> None:
        super().__init__(f"{param or 'body'}: {reason}")
        self.param = param
        self.reason = reason

    def prefixed(self, prefix: str) -> "BadTextError":
        """The same error, located under ``prefix`` (``exemplars.3.``)."""
        return BadTextError(f"{prefix}{self.param}" if self.param else prefix.rstrip(".") or None, self.reason)


def text_problem(s: str) -> str | None:
    """Why ``s`` cannot be stored, or None."""
    if "\x00" in s:
        return "contains a NUL character (U+0000), which is not allowed"
    if not s.isascii() and _SURROGATE.search(s):
        return "contains a lone surrogate (U+D800-U+DFFF), which is not valid Unicode"
    return None


def check_text(value: Any, param: str | None = None) -> None:
    """Raise BadTextError naming the first string in ``value`` (str, or JSON-like nesting of dicts,
    lists and tuples) that holds a NUL or a lone surrogate; dict keys are checked too. Iterative
    (no recursion limit) and linear in the size of ``value``."""
    stack: list[tuple[Any, str | None]] = [(value, param)]
    while stack:
        v, where = stack.pop()
        if isinstance(v, str):
            why = text_problem(v)
            if why:
                raise BadTextError(where, why)
        elif isinstance(v, dict):
            for k in v:
                why = text_problem(k) if isinstance(k, str) else None
                if why:
                    raise BadTextError(where, f"a key {why}")
            for k, item in reversed(list(v.items())):  # reversed: the first bad field in order is reported
                stack.append((item, f"{where}.{k}" if where else str(k)))
        elif isinstance(v, (list, tuple)):
            for i in range(len(v) - 1, -1, -1):
                stack.append((v[i], f"{where}.{i}" if where else str(i)))


# --- visible text -----------------------------------------------------------------------------------------
# An identifying text field (a label, a dataset name) must hold something a person can see: not only whitespace,
# control characters (Unicode Cc) or format characters (Cf: U+200B-U+200D zero-width space / joiners, U+2060,
# U+FEFF, U+00AD, bidi controls). One pattern, used by the check and published in the OpenAPI document, so a
# client or a fuzzer generates what the server accepts. Python's str.strip() leaves Cf characters in place.
# Basic Multilingual Plane only (JSON Schema's ECMA regexes have no astral escapes without the u flag): an astral
# Cf character (U+E0001 language tag, U+1D173 musical format) counts as visible here; ``visible_form`` drops them.


def _invisible_ranges() -> str:
    out, start = [], None
    for cp in range(0x10000):
        hidden = unicodedata.category(chr(cp)) in ("Cc", "Cf")
        if hidden and start is None:
            start = cp
        if not hidden and start is not None:
            out.append(f"\\u{start:04x}" if start == cp - 1 else f"\\u{start:04x}-\\u{cp - 1:04x}")
            start = None
    return "".join(out)


VISIBLE_PATTERN = f"[^\\s{_invisible_ranges()}]"
_VISIBLE = re.compile(VISIBLE_PATTERN)
INVISIBLE_ONLY = "must contain visible text, not only whitespace or invisible (format or control) characters"


def has_visible(s: str) -> bool:
    """Whether ``s`` holds a character that is neither whitespace nor a BMP control / format character."""
    return _VISIBLE.search(s) is not None


def visible_form(s: str) -> str:
    """``s`` as two labels are compared: format characters (every plane) removed, trimmed, Unicode NFC."""
    if not s.isascii():
        s = "".join(ch for ch in s if unicodedata.category(ch) != "Cf")
    return unicodedata.normalize("NFC", s.strip())

