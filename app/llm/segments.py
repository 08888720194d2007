"""Token ids of prompts assembled from remembered pieces: tokenized exemplars and templates (issue 27).

An ``rnm`` answer of 8 x 4 renders 8 prompts from a template, the instruction, 32 demonstrations and
the query, and tokenized all of them whole (~0.7 ms of the request thread per answer on this CPU),
although every demonstration and the instruction were tokenized by earlier answers. A prompt of the
raw templates is its blocks joined by a blank line ("\\n\\n"); this module splits a text before
each blank line that sits between two non-whitespace characters and tokenizes each piece on its
own, remembering the pieces (an LRU keyed by tenant and text: one tenant's pieces are never another's
hits, as for the prefix cache).

**Exact, not approximate.** For a byte-level BPE whose only pre-tokenizer is GPT-2's regex (the
``ByteLevel`` pre-tokenizer with ``use_regex`` and no prefix space; no normalizer; no added token
holding whitespace or stripping it; SmolLM2's tokenizer), the ids of ``x + "\\n\\n" + y`` are the ids of ``x``
followed by those of ``"\\n\\n" + y`` whenever ``x`` ends and ``y`` starts with a non-whitespace
character: BPE merges act within pre-tokens (Sennrich et al. 2016 as implemented by GPT-2 and HF
tokenizers), and the regex ``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+``
ends a pre-token at the end of ``x`` (no alternative crosses from a non-whitespace character into
"\\n"; the only lookahead, ``(?!\\S)``, follows whitespace) and starts the next one at the "\\n" in
both texts. Python's whitespace (``str.isspace``) is a superset of the regex's Unicode ``\\s`` (it adds
U+001C-U+001F), so a junction Python calls non-whitespace on both sides is one for the tokenizer too.
``separable`` admits exactly that tokenizer configuration; any other model tokenizes whole texts, as
before. The encoder also checks itself: its first ``VERIFY_FIRST`` calls, and one in
``VERIFY_EVERY`` after, tokenize the whole texts too, and on any difference it switches itself off
for good (``mismatches``) and returns the whole texts' ids.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Callable, Sequence
from typing import Any

from app.lru import LRU

# A split point: before "\n\n" that follows a non-whitespace character and precedes one.
_JUNCTION = re.compile(r"(?<=\S)(?=\n\n\S)")
VERIFY_FIRST, VERIFY_EVERY = 16, 64
DEFAULT_PIECES = 4096  # remembered pieces per model
# Longer pieces are tokenized every time, never remembered: with ids kept as 4-byte arrays the memo of one
# model holds at most ~4096 x (4096 characters + ~4 KB of ids), ~35 MB, whatever callers send (a hostile
# stream of long distinct queries included); a demonstration of the bundled tasks is ~60 characters.
MAX_PIECE_CHARS = 4096


def separable(backend: Any) -> bool:
    """Whether ``backend`` (a ``tokenizers.Tokenizer``) is the configuration of the module docstring."""
    try:
        state = json.loads(backend.to_str())
    except (AttributeError, TypeError, ValueError):
        return False
    pre = state.get("pre_tokenizer") or {}
    if state.get("normalizer") is not None or pre.get("type") != "ByteLevel":
        return False
    if not pre.get("use_regex", True) or pre.get("add_prefix_space", False):
        return False
    # An added token is matched on the whole text before pre-tokenizing: none may hold whitespace, nor
    # strip it from its neighbours (lstrip / rstrip would eat the blank line of a junction) or look at
    # them (single_word).
    return not any(any(c.isspace() for c in str(t.get("content", ""))) or t.get("lstrip") or t.get("rstrip")
                   or t.get("single_word") for t in state.get("added_tokens") or [])


def pieces(text: str) -> list[str]:
    """``text`` split before each blank line between two non-whitespace characters (joined: ``text``)."""
    return _JUNCTION.split(text)


class SegmentEncoder:
    """Token ids of many texts from remembered pieces (module docstring). ``encode``: the plain batched
    encoder of whole texts (``encode_plain_many`` under the tokenizer's lock)."""

    def __init__(self, encode: Callable[[Sequence[str]], list[list[int]]], size: int = DEFAULT_PIECES) -> None:
        self._encode = encode
        self._lru = LRU(size)
        self.enabled = True
        self.calls = self.hits = self.misses = self.mismatches = 0

    def encode_many(self, texts: Sequence[str], tenant: str | None) -> list[list[int]]:
        texts = list(texts)
        if not self.enabled:
            return self._encode(texts)
        self.calls += 1
        split = [pieces(t) for t in texts]
        known: dict[str, Any] = {}
        missing: list[str] = []
        for parts in split:
            for p in parts:
                if p in known:
                    continue
                ids = self._lru.get((tenant, p)) if len(p) <= MAX_PIECE_CHARS else None
                if ids is None:
                    known[p] = ()  # placeholder: encoded below, once
                    missing.append(p)
                else:
                    known[p] = ids
                    self.hits += 1
        if missing:
            self.misses += len(missing)
            for p, ids in zip(missing, self._encode(missing)):
                known[p] = array("i", ids)
                if len(p) <= MAX_PIECE_CHARS:
                    self._lru.put((tenant, p), known[p])
        rows = [[i for p in parts for i in known[p]] for parts in split]
        if self.calls <= VERIFY_FIRST or self.calls % VERIFY_EVERY == 0:
            whole = [list(r) for r in self._encode(texts)]
            if whole != rows:
                self.mismatches += 1
                self.enabled = False
                self._lru.clear()
                return whole
        return rows

    def stats(self) -> dict[str, int | bool]:
        return {"enabled": self.enabled, "calls": self.calls, "hits": self.hits, "misses": self.misses,
                "mismatches": self.mismatches, "held": len(self._lru)}


__all__ = ["DEFAULT_PIECES", "MAX_PIECE_CHARS", "SegmentEncoder", "VERIFY_EVERY", "VERIFY_FIRST", "pieces",
           "separable"]
