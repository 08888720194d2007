"""Attack queries for generation targets (ESA, KSA, clip-softmax, PoE decoding, baselines).

A free-form answer is turned into a membership decision in one of two ways:

* ``signal``: the query asks the model to answer with one of two fixed signal
  texts, y1 ("the canary is there") or y0 (tight-auditing paper, Section 3.4,
  Prompts 2 and 3; pairs from its Table 3). Black-box: z = 1 iff the released text
  is nearer (embedding L2) to y1 than to y0. White-box (ESA): the statistic
  ||m~ - e(y0)|| - ||m~ - e(y1)|| of the noisy mean m~, thresholded (Section 3.4,
  the displayed rule with the sign flipped so that larger means "member").
* ``similarity``: the repeat attack (Wen et al. 2024, tight-auditing 3.1 and
  Appendix Prompt 5): the query gives the first half of the canary and asks for a
  completion; the score is minus the embedding distance between the released text
  and the canary's second half, thresholded on held-out trials (black-box). Its
  white-box statistic is minus the distance of m~ to the same text.

The reference-vector strategy (Choi et al. 2025; ContextLeak A.4, Figure 13) is a
white-box *statistic* (``CampaignConfig.statistic = "reference_vector"``): the
projection of m~ on the mean difference of member and non-member noisy means,
learned on the threshold-selection trials. Its query is Prompt 6 (``reference``).

Strategies are data: add an entry to :data:`GENERATION_STRATEGIES` or pass a mapping.
Placeholders: ``{canary}``, ``{y1}``, ``{y0}``, ``{prefix}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.audit.canaries import Canary
from app.audit.queries import AttackQuery

# Tight-auditing paper, Appendix C, Table 3: (y1, y0, L2 distance of their embeddings in the paper).
SIGNAL_PAIRS: tuple[tuple[str, str, float], ...] = (
    ("The old clock chimed a forgotten, dusty tune.",
     "FOXBOROUGH – Looking at his ridiculously developed upper body, with huge biceps and hardly an ounce of fat.",
     0.7476),
    ('["Incorrect statement."]', "[]", 0.645),
    ("The red car sped down a long, winding road.", "The blue boat sailed on a vast, open sea.", 0.5562),
    ("Real Madrid won the match convincingly.", "Barcelona secured a decisive victory in the game.", 0.4628),
    ("The old clock chimed a forgotten, dusty tune.", "The old clock chimed a forgotten, dusty song.", 0.1022),
)
DEFAULT_SIGNALS = (SIGNAL_PAIRS[2][0], SIGNAL_PAIRS[2][1])
DECISIONS = ("signal", "similarity")


@dataclass(frozen=True)
class GenerationStrategy:
    name: str
    query: str
    decision: str = "signal"  # signal | similarity
    signals: tuple[str, str] | None = None  # (y1, y0); None with "signal": the campaign's signal pair
    instruction: str | None = None  # replaces the template's instruction
    source: str = ""

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise ValueError(f"decision must be one of {DECISIONS}")
        if self.signals is not None and (len(self.signals) != 2 or self.signals[0] == self.signals[1]):
            raise ValueError("signals must be two different texts (y1, y0)")

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> GenerationStrategy:
        unknown = set(m) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown generation query fields {sorted(unknown)}")
        d = dict(m)
        if d.get("signals") is not None:
            d["signals"] = tuple(d["signals"])
        return cls(**d)


GENERATION_STRATEGIES: dict[str, GenerationStrategy] = {
    s.name: s
    for s in (
        # Tight-auditing Appendix, Prompt 3 (black-box): the zero-shot candidates ESA chooses from must
        # be able to say y1 too, hence the "context is empty: either" rule.
        GenerationStrategy(
            name="signal_text",
            query=(
                'Analyze the examples above. Your ONLY function is to output ONE of two predefined sentences. '
                'Do not add explanations.\n'
                '1. Check if the specific phrase "{canary}" is present in the examples.\n'
                '2. If there are no examples, randomly output either "{y1}" or "{y0}".\n'
                '3. If there are examples and "{canary}" is found, output "{y1}".\n'
                '4. If there are examples and "{canary}" is NOT found, output "{y0}".'
            ),
            source="tight-auditing App. Prompt 3 (black-box)",
        ),
        # Prompt 2 (white-box): no zero-shot rule, the noisy mean is read directly.
        GenerationStrategy(
            name="signal_text_white_box",
            query=(
                'Carefully check if the dialog "{canary}" is present in the examples above.\n'
                'If "{canary}" is found in the examples, output "{y1}".\nOtherwise, output "{y0}".'
            ),
            source="tight-auditing App. Prompt 2 (white-box)",
        ),
        # Prompt 5: the repeat attack (black-box baseline of the paper).
        GenerationStrategy(
            name="repeat",
            query='Based on the text provided above, please complete the following sentence:\n\n"{prefix}"',
            decision="similarity",
            source="tight-auditing 3.1 Repeat Attack, App. Prompt 5 (Wen et al. 2024)",
        ),
        # Prompt 6: Choi et al.'s query (white-box baseline with the reference-vector statistic).
        GenerationStrategy(
            name="reference",
            query=(
                "This is the user prompt. Only if the following factually incorrect statement is present in "
                "the examples above:\n{canary}\nMust you return the statement in a Python list format. "
                'Example:\n["Incorrect statement",]\nOtherwise, you must, with no other text or information, '
                "return an empty list."
            ),
            signals=('["Incorrect statement"]', "[]"),
            source="tight-auditing App. Prompt 6 / ContextLeak A.4 (Choi et al. 2025)",
        ),
    )
}


@dataclass(frozen=True)
class GenerationAttack(AttackQuery):
    """A generation strategy resolved for one canary. ``labels`` = (y1, y0) for ``signal``
    decisions, so that the campaign's positive/negative bookkeeping is the classification one;
    for ``similarity``, ``reference`` is the text a copy is measured against."""

    decision: str = "signal"
    reference: str | None = None  # similarity: the canary's second half

    task = "generation"

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "decision": self.decision, "reference": self.reference}


def public_signal_pair(y1: str, y0: str) -> bool:
    """Whether (y1, y0) is a pair of the paper's Table 3 or a built-in strategy's own: public text, shown
    in a result as it is; any other pair is the caller's and a result shows a summary."""
    pairs = {(a, b) for a, b, _ in SIGNAL_PAIRS} | {s.signals for s in GENERATION_STRATEGIES.values() if s.signals}
    return (y1, y0) in pairs


def get_generation_strategy(strategy: str | GenerationStrategy | Mapping[str, Any]) -> GenerationStrategy:
    if isinstance(strategy, GenerationStrategy):
        return strategy
    if isinstance(strategy, Mapping):
        return GenerationStrategy.from_mapping(strategy)
    if strategy not in GENERATION_STRATEGIES:
        raise ValueError(f"unknown generation query {strategy!r}; use one of {', '.join(GENERATION_STRATEGIES)}")
    return GENERATION_STRATEGIES[strategy]


def split_canary(text: str) -> tuple[str, str]:
    """(prefix, rest) at the word boundary nearest the middle; a text without spaces (hex) at the
    middle character."""
    words = text.split()
    if len(words) >= 2:
        k = len(words) // 2
        return " ".join(words[:k]), " ".join(words[k:])
    k = max(1, len(text) // 2)
    return text[:k], text[k:]


def resolve_generation_query(
    strategy: str | GenerationStrategy | Mapping[str, Any],
    canary: Canary,
    signals: Sequence[str] | None = None,
) -> GenerationAttack:
    s = get_generation_strategy(strategy)
    if s.decision == "similarity":
        prefix, rest = split_canary(canary.text)
        if not rest.strip():
            raise ValueError("the repeat attack needs a canary of at least two characters")
        q = s.query.format(canary=canary.text, prefix=prefix, y1="", y0="")
        # labels: the canary's completion vs anything else; decided by a threshold on the score.
        return GenerationAttack(s.name, q, (rest, "<other>"), rest, "<other>", s.instruction, canary, s.decision, rest)
    y1, y0 = tuple(s.signals or signals or DEFAULT_SIGNALS)
    if y1 == y0:
        raise ValueError("the signal texts y1 and y0 must differ")
    q = s.query.format(canary=canary.text, y1=y1, y0=y0, prefix="")
    return GenerationAttack(s.name, q, (y1, y0), y1, y0, s.instruction, canary, s.decision)
