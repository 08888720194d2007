"""Canaries: uniquely identifiable exemplars whose membership an audit tests.

ContextLeak Section 3.2 and Appendix A.5: random hexadecimal strings, unigram
canaries (rare tokens of the target's tokenizer over the dataset), false facts
(a list written for this project), and, as in the tight-auditing paper
(Section 4.1), an exemplar drawn from held-out data. A canary becomes an
exemplar ``(text, label)``: "Input: canary text, label: canary label"
(ContextLeak 3.2, "Crafting User Queries").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

CANARY_KINDS = ("hex", "unigram", "false_fact", "heldout")

# Our own list (ContextLeak A.5 had GPT write 100; these are written by hand). Each is
# short, plainly false and unlikely to be a training-set verbatim.
FALSE_FACTS: tuple[str, ...] = (
    "The sun rises in the west.",  # ContextLeak A.5's example
    "Water boils at 40 degrees Celsius at sea level.",
    "The Moon is larger than the Earth.",
    "Penguins are commonly found at the North Pole.",
    "Paris is the capital of Canada.",
    "Spiders have exactly six legs.",
    "The Pacific is the smallest ocean on Earth.",
    "Humans have three lungs.",
    "Mount Everest is located in Brazil.",
    "Gold is lighter than aluminium.",
    "A week has nine days.",
    "Lightning never strikes the ground.",
    "Bananas grow underground like potatoes.",
    "The Amazon river flows through Norway.",
    "Snow is usually bright green.",
    "Fish breathe with lungs on land.",
    "The Great Wall of China is in Mexico.",
    "Ice sinks in liquid water.",
    "Cows lay eggs every morning.",
    "Shakespeare wrote his plays in Japanese.",
    "The Earth has four moons.",
    "Sound travels faster than light.",
    "Sharks are a kind of bird.",
    "Venus is the farthest planet from the Sun.",
    "Diamonds are made of frozen water.",
    "The Sahara is the wettest place on Earth.",
    "Owls are active only at noon.",
    "Tomatoes are a type of metal.",
    "A triangle has five sides.",
    "Elephants can fly short distances.",
)


@dataclass(frozen=True)
class Canary:
    """The audited record: its text (the exemplar input), its label and how it was made."""

    kind: str
    text: str
    label: str
    # Provenance, not identity (equality is kind, text and label): where a result says where the canary came from.
    index: int | None = field(default=None, compare=False)  # heldout: its position in the held-out set
    tokens: int | None = field(default=None, compare=False)  # unigram: how many rare tokens were sampled

    def exemplar(self) -> tuple[str, str]:
        return (self.text, self.label)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "text": self.text, "label": self.label}
        out.update({k: v for k, v in (("index", self.index), ("tokens", self.tokens)) if v is not None})
        return out


def hex_canary(rng: np.random.Generator, label: str, n_bytes: int = 8) -> Canary:
    """Random bytes as hex digits (ContextLeak 3.2 item 1, A.5: 16 hex digits = 8 bytes)."""
    if n_bytes < 1:
        raise ValueError("n_bytes must be >= 1")
    return Canary("hex", rng.bytes(n_bytes).hex(), label)


def false_fact_canary(rng: np.random.Generator, label: str, facts: Sequence[str] = FALSE_FACTS) -> Canary:
    """One statement from a list of false facts (ContextLeak 3.2 item 3)."""
    if not facts:
        raise ValueError("facts must not be empty")
    return Canary("false_fact", str(facts[int(rng.integers(len(facts)))]), label)


def rare_tokens(tokenizer: Any, texts: Iterable[str], n: int) -> list[int]:
    """Token ids of the dataset sorted from rarest (count 1 first), ids that decode to text with a
    letter or digit only; ties keep first-seen order (deterministic)."""
    counts: Counter[int] = Counter()
    for t in texts:
        counts.update(tokenizer.tokenize(t))
    order = sorted(counts, key=lambda tok: counts[tok])  # stable: first-seen order within a count
    out = []
    for tok in order:
        s = tokenizer.detokenize([tok])
        if any(ch.isalnum() for ch in s):
            out.append(tok)
        if len(out) >= max(n, 1):
            break
    return out


def unigram_canary(
    tokenizer: Any, texts: Sequence[str], rng: np.random.Generator, label: str, n_tokens: int = 16,
    pool: int = 256,
) -> Canary:
    """Rare unigram tokens of the target's tokenizer over the dataset, sampled and concatenated
    (ContextLeak 3.2 item 2 and A.5: 16 tokens; after Panda et al. 2025). ``pool``: how many of the
    rarest tokens to sample from. ``tokenizer`` needs ``tokenize(text)`` and ``detokenize(ids)``
    (every ``app.llm`` language model has both)."""
    if n_tokens < 1:
        raise ValueError("n_tokens must be >= 1")
    if not hasattr(tokenizer, "tokenize") or not hasattr(tokenizer, "detokenize"):
        raise ValueError("the unigram canary needs the target's tokenizer (tokenize and detokenize)")
    cands = rare_tokens(tokenizer, texts, max(pool, n_tokens))
    if not cands:
        raise ValueError("the dataset has no tokens to build a unigram canary from")
    pick = rng.choice(len(cands), size=n_tokens, replace=len(cands) < n_tokens)
    text = tokenizer.detokenize([cands[i] for i in pick]).strip()
    return Canary("unigram", text, label, tokens=n_tokens)


def heldout_canary(heldout: Sequence[tuple[str, str]], rng: np.random.Generator) -> Canary:
    """An exemplar drawn from held-out data, with its true label (tight-auditing paper, 4.1:
    canaries sampled from the dataset). Needed by the GAP and brainwash queries."""
    if not heldout:
        raise ValueError("no held-out exemplars to draw a canary from")
    i = int(rng.integers(len(heldout)))
    text, label = heldout[i]
    return Canary("heldout", text, label, index=i)


def make_canary(
    kind: str,
    rng: np.random.Generator,
    *,
    label: str | None = None,
    dataset_texts: Sequence[str] = (),
    heldout: Sequence[tuple[str, str]] = (),
    tokenizer: Any = None,
    n_tokens: int = 16,
    n_bytes: int = 8,
) -> Canary:
    """A canary of ``kind`` (one of :data:`CANARY_KINDS`). ``label`` is the canary's label for the
    synthetic kinds (the held-out kind keeps its own)."""
    if kind not in CANARY_KINDS:
        raise ValueError(f"unknown canary kind {kind!r}; use one of {', '.join(CANARY_KINDS)}")
    if kind == "heldout":
        return heldout_canary(heldout, rng)
    if label is None:
        raise ValueError(f"a {kind} canary needs a label")
    if kind == "hex":
        return hex_canary(rng, label, n_bytes)
    if kind == "false_fact":
        return false_fact_canary(rng, label)
    return unigram_canary(tokenizer, dataset_texts, rng, label, n_tokens)
