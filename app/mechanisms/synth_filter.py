"""Drop degenerate synthetic demonstrations before a synthetic set is published (issue 29, item 6).

The DP synthesizer (``app.mechanisms.synthesize``, Tang et al. 2024 Alg. 1) releases every token under
its charge; some released texts are not usable demonstrations: ``'A'``, ``'I`` (a quote opened and cut
off), ``79.8 Celsius (2`` (a bracket opened and cut off at ``max_tokens``), junk like ``httpss06363.n``
at small epsilon. This filter reads ONLY the released synthetic texts (never a private exemplar), so it
is post-processing of a DP release and changes nothing in the privacy cost or the charge (Dwork & Roth
2014, Prop. 2.1). What it reports is counts per reason and per label, never text.

A text is dropped, first reason that applies:

* ``empty``: nothing but whitespace;
* ``too_short``: no word of two or more letters (``A``, ``I``, ``7``);
* ``non_words``: under a third of its non-space characters are letters, or over half of its tokens are
  not word-like (a word, a number, a time, a word-number like ``5th`` / ``6pm``);
* ``truncated``: an opening bracket or quote without its closing one (``(``, ``[``, ``{``, an odd
  number of ``"``, a word-initial ``'`` with no word-final one; apostrophes inside words don't count);
* ``duplicate``: the same text (case and spacing aside) as a demonstration kept before it.

**A label keeps its last demonstration** against the two soft reasons (``truncated``, ``duplicate``): if
every text of a label would go, its first truncated (else duplicate) text stays. Measured in
``benchmarks/bench_amortized.py`` (docs/synthesize.md): without this rule, at total eps 1 the filter dropped
the only demonstrations of two labels (both cut off inside a quote) and synthetic ICL fell from 0.78 to 0.40;
a cut-off demonstration of a label teaches more than none. Empty, too short and non-word texts always go.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

REASONS = ("empty", "too_short", "non_words", "truncated", "duplicate")
SOFT = ("truncated", "duplicate")  # kept when they are all a label has (module doc)
_WORD = re.compile(r"[^\W\d_]{2,}")
_TOKEN_OK = re.compile(
    r"^[\W_]*(?:[^\W\d_]+(?:['’\-][^\W\d_]+)*|\d+(?:[.,:/\-]\d+)*(?:st|nd|rd|th|am|pm|s|k|%)?)[\W_]*$",
    re.IGNORECASE)
_PAIRS = (("(", ")"), ("[", "]"), ("{", "}"), ("“", "”"))
_OPEN_SINGLE = re.compile(r"(?:^|(?<=[\s(\[{\"“]))['‘](?=\w)")
_CLOSE_SINGLE = re.compile(r"(?<=[\w.!?,])['’](?=$|[\s)\]}\".,!?;:])")


def degenerate_reason(text: str) -> str | None:
    """Why ``text`` is not a usable demonstration (one of :data:`REASONS` but ``duplicate``), or None."""
    t = " ".join(str(text).split())
    if not t:
        return "empty"
    if not _WORD.search(t):
        return "too_short"
    chars = t.replace(" ", "")
    letters = sum(c.isalpha() for c in chars)
    tokens = t.split()
    if letters * 3 < len(chars) or sum(not _TOKEN_OK.match(w) for w in tokens) * 2 > len(tokens):
        return "non_words"
    if any(t.count(a) > t.count(b) for a, b in _PAIRS) or t.count('"') % 2:
        return "truncated"
    if len(_OPEN_SINGLE.findall(t)) > len(_CLOSE_SINGLE.findall(t)):
        return "truncated"
    return None


@dataclass
class FilterResult:
    kept: list[tuple[str, str]]  # (text, label), in the input order
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> count (every reason, zeros included)
    kept_per_label: dict[str, int] = field(default_factory=dict)
    reasons: list[str | None] = field(default_factory=list)  # per input example: None = kept

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())


def filter_demonstrations(examples: Sequence[tuple[str, str]], labels: Sequence[str] | None = None) -> FilterResult:
    """The usable demonstrations of ``examples`` ((text, label) pairs), in order, and what was dropped."""
    seen: set[str] = set()
    reasons: list[str | None] = []
    for text, label in examples:
        why = degenerate_reason(text)
        key = " ".join(str(text).split()).casefold()
        if why is None and key in seen:
            why = "duplicate"
        reasons.append(why)
        if why is None:
            seen.add(key)
    for y in {b for _, b in examples}:  # a label keeps its last demonstration against a soft reason
        mine = [i for i, (_, b) in enumerate(examples) if b == y]
        if mine and all(reasons[i] is not None for i in mine):
            for soft in SOFT:
                rescue = next((i for i in mine if reasons[i] == soft), None)
                if rescue is not None:
                    reasons[rescue] = None
                    break
    kept = [(" ".join(str(t).split()), b) for (t, b), why in zip(examples, reasons) if why is None]
    counts = Counter(r for r in reasons if r is not None)
    per_label = Counter(y for _, y in kept)
    names = list(labels) if labels is not None else sorted({y for _, y in examples})
    return FilterResult(kept, {r: counts.get(r, 0) for r in REASONS}, {y: per_label.get(y, 0) for y in names}, reasons)


def short_labels(kept_per_label: dict[str, int], requested: int) -> list[str]:
    """Labels left with fewer than half the requested demonstrations (none at all included)."""
    return [y for y, k in kept_per_label.items() if k * 2 < requested or k == 0]


__all__ = ["REASONS", "SOFT", "FilterResult", "degenerate_reason", "filter_demonstrations", "short_labels"]
