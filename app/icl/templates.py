"""Prompt templates for in-context classification.

A prompt is an instruction line, then demonstrations, then the query:

    {instruction}

    {input_prefix}{exemplar input}
    {output_prefix}{label_prefix}{exemplar label}

    ...

    {input_prefix}{query}
    {output_prefix}

and the model is scored on the continuations ``label_prefix + label`` (one per
label, see :mod:`app.icl.scoring`). The prompt never ends in a space: the space
belongs to the label, which is how BPE tokenizers split "Answer: Sports"
(``" Sports"`` is one token in SmolLM2's and GPT-2's vocabularies).

Two renderings (``PromptTemplate.mode``):

* ``"raw"``: the plain text above, as in ICLInf Table 2 (Li, Flemings et al.; Zhao et
  al. 2021, Table 5). Works with any causal LM, base or instruct.
* ``"chat"``: the model's own chat template (``lm.apply_chat_template``), one
  user turn per demonstration input and one assistant turn per demonstration
  label, the instruction as the system message; the final assistant turn is
  opened and pre-filled with ``output_prefix`` so that the label continuation
  is scored exactly as in raw mode.

The default is ``"raw"``: it is ICLInf's format, it works for base models
without a chat template, and on the bundled task it is where demonstrations
matter for SmolLM2-135M-Instruct (zero-shot 0.24 -> 8-shot 0.63; in chat mode
zero-shot is already 0.70 and 8-shot 0.66; docs/icl.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, Mapping, Sequence

Mode = Literal["raw", "chat"]

Exemplar = tuple[str, str]
"""One demonstration: (input text, label)."""


class ExemplarPairs(tuple[Exemplar, ...]):
    """Exemplars that are all exact ``(str, str)`` tuples, checked once when built (a dataset's cached set):
    ``as_exemplar`` returns each as it is, so a whole-set pass (``normalize_exemplars``) may skip them."""

    __slots__ = ()

    def __new__(cls, pairs: Any) -> "ExemplarPairs":
        items = tuple(pairs)
        for i, e in enumerate(items):
            if not (type(e) is tuple and len(e) == 2 and type(e[0]) is str and type(e[1]) is str):
                raise TypeError(f"exemplar {i} is not a (str, str) tuple")
        return super().__new__(cls, items)


def as_exemplar(e: Any) -> Exemplar:
    """(input, label) from a pair, a mapping with ``input``/``output`` (or ``label``), or an object with those attributes."""
    if type(e) is tuple and len(e) == 2 and type(e[0]) is str and type(e[1]) is str:
        return e  # already one (the common case: no ABC isinstance checks, hundreds per answer)
    if isinstance(e, Mapping):
        text = e.get("input")
        label = e.get("output", e.get("label"))
    elif isinstance(e, (tuple, list)) and len(e) == 2:
        text, label = e
    else:
        text, label = getattr(e, "input", None), getattr(e, "output", None)
    if not isinstance(text, str) or not isinstance(label, str):
        raise TypeError(f"an exemplar must be an (input, label) pair of strings, got {type(e).__name__}")
    return text, label


def join_labels(labels: Sequence[str]) -> str:
    """'a, b, or c' (the wording of Zhao et al. / ICLInf instructions)."""
    labels = list(labels)
    if len(labels) <= 2:
        return " or ".join(labels)
    return ", ".join(labels[:-1]) + ", or " + labels[-1]


@dataclass(frozen=True)
class PromptTemplate:
    """How exemplars and a query become one prompt.

    ``instruction`` may contain ``{labels}``, replaced by the label set
    ("weather, music, or alarm"); leave it empty for no instruction line.
    ``labels`` is the preset's label set (e.g. ICLInf's AG News labels), used
    when a caller gives none.
    """

    instruction: str = "Classify the text into one of these categories: {labels}."
    input_prefix: str = "Input: "
    output_prefix: str = "Label:"
    separator: str = "\n\n"  # between demonstrations (and after the instruction)
    io_separator: str = "\n"  # between an input and its output line
    label_prefix: str = " "  # what the model emits between output_prefix and the label
    mode: Mode = "raw"
    name: str = "default"
    labels: tuple[str, ...] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.mode not in ("raw", "chat"):
            raise ValueError(f"template mode must be 'raw' or 'chat', got {self.mode!r}")
        if self.output_prefix.endswith(" ") and self.label_prefix.startswith(" "):
            raise ValueError("output_prefix ends in a space and label_prefix starts with one: the label would follow two spaces")

    # ------------------------------------------------------------ pieces

    def continuation(self, label: str) -> str:
        """The text scored for ``label`` after the prompt (``label_prefix + label``)."""
        return self.label_prefix + label

    def continuations(self, labels: Sequence[str]) -> list[str]:
        return [self.continuation(label) for label in labels]

    def instruction_text(self, labels: Sequence[str] | None) -> str:
        if not self.instruction:
            return ""
        if "{labels}" in self.instruction:
            labs = labels if labels is not None else self.labels
            if labs is None:
                raise ValueError(f"template {self.name!r} names {{labels}} in its instruction but no labels were given")
            return self.instruction.replace("{labels}", join_labels(labs))
        return self.instruction

    def demonstration(self, text: str, label: str) -> str:
        return f"{self.input_prefix}{text}{self.io_separator}{self.output_prefix}{self.continuation(label)}"

    def query_block(self, text: str) -> str:
        return f"{self.input_prefix}{text}{self.io_separator}{self.output_prefix}"

    # ----------------------------------------------------------- rendering

    def render_raw(self, exemplars: Sequence[Any], query: str, labels: Sequence[str] | None = None) -> str:
        """The plain-text prompt (no chat markup)."""
        parts = []
        instruction = self.instruction_text(labels)
        if instruction:
            parts.append(instruction)
        parts.extend(self.demonstration(*as_exemplar(e)) for e in exemplars)
        parts.append(self.query_block(query))
        return self.separator.join(parts)

    def chat_messages(self, exemplars: Sequence[Any], query: str, labels: Sequence[str] | None = None) -> list[dict]:
        """Chat turns: system = instruction, then user/assistant per demonstration, then the query."""
        msgs: list[dict] = []
        instruction = self.instruction_text(labels)
        if instruction:
            msgs.append({"role": "system", "content": instruction})
        for e in exemplars:
            text, label = as_exemplar(e)
            msgs.append({"role": "user", "content": f"{self.input_prefix}{text}"})
            msgs.append({"role": "assistant", "content": f"{self.output_prefix}{self.continuation(label)}"})
        msgs.append({"role": "user", "content": f"{self.input_prefix}{query}"})
        return msgs

    def render_chat(self, lm: Any, exemplars: Sequence[Any], query: str, labels: Sequence[str] | None = None) -> str:
        """The prompt through ``lm.apply_chat_template``, the assistant turn opened with ``output_prefix``."""
        opened = lm.apply_chat_template(self.chat_messages(exemplars, query, labels), add_generation_prompt=True)
        return opened + self.output_prefix

    def render(self, exemplars: Sequence[Any], query: str, labels: Sequence[str] | None = None, lm: Any = None) -> str:
        """The prompt in this template's ``mode`` (``lm`` is needed for ``"chat"``)."""
        if self.mode == "chat":
            if lm is None:
                raise ValueError(f"template {self.name!r} renders through the model's chat template: pass lm")
            return self.render_chat(lm, exemplars, query, labels)
        return self.render_raw(exemplars, query, labels)

    def with_(self, **changes: Any) -> "PromptTemplate":
        """A copy with some fields changed (e.g. ``mode="chat"``)."""
        return replace(self, **changes)


# ------------------------------------------------------------------ presets
# ICLInf (Li, Flemings et al.) Appendix D.1, Table 2, "taken from table 5 of [Zhao et
# al. 2021] with slight modification": instruction, input prefix, output
# prefix and label words verbatim.

_ICLINF_SUFFIX = "Output only the category name (no explanations or extra text) as the first token."

ICLINF_AGNEWS = PromptTemplate(
    instruction="Classify the news articles into the categories of World, Sports, Business, and Technology. " + _ICLINF_SUFFIX,
    input_prefix="Article: ",
    output_prefix="Answer:",
    name="iclinf-agnews",
    labels=("World", "Sports", "Business", "Technology"),
)

ICLINF_DBPEDIA = PromptTemplate(
    instruction=(
        "Classify the documents based on whether they are about one of Company, School, Artist, Athlete, "
        "Politician, Transportation, Building, Nature, Village, Animal, Plant, Album, Film, or Book. " + _ICLINF_SUFFIX
    ),
    input_prefix="Article: ",
    output_prefix="Answer:",
    name="iclinf-dbpedia",
    labels=("Company", "School", "Artist", "Athlete", "Politician", "Transportation", "Building", "Nature",
            "Village", "Animal", "Plant", "Album", "Film", "Book"),
)

ICLINF_TREC = PromptTemplate(
    instruction=(
        "Classify the questions based on whether their answer type is a Number, Location, Person, Description, "
        "Entity, or Abbreviation. Output only the question type (no explanations or extra text) as the first token."
    ),
    input_prefix="Question: ",
    output_prefix="Answer Type:",
    name="iclinf-trec",
    labels=("Number", "Location", "Person", "Description", "Entity", "Abbreviation"),
)

# Not in ICLInf Table 2: our own wording in the same style for SetFit/subj.
SUBJ = PromptTemplate(
    instruction="Classify the sentences as objective or subjective. " + _ICLINF_SUFFIX,
    input_prefix="Input: ",
    output_prefix="Type:",
    name="subj",
    labels=("objective", "subjective"),
)

# The bundled task (app/icl/data/assistant_intents.jsonl).
ASSISTANT_INTENTS = PromptTemplate(
    instruction="Classify each request to the voice assistant by its intent: {labels}.",
    input_prefix="Request: ",
    output_prefix="Intent:",
    name="assistant-intents",
    labels=("weather", "music", "alarm", "lights", "shopping"),
)

# The second bundled task (app/icl/data/support_intents.jsonl).
SUPPORT_INTENTS = PromptTemplate(
    instruction="Classify each customer message by its intent: {labels}.",
    input_prefix="Message: ",
    output_prefix="Intent:",
    name="support-intents",
    labels=("billing", "shipping", "refund", "technical", "account"),
)

DEFAULT = PromptTemplate()

TEMPLATES: dict[str, PromptTemplate] = {
    t.name: t for t in (DEFAULT, ICLINF_AGNEWS, ICLINF_DBPEDIA, ICLINF_TREC, SUBJ, ASSISTANT_INTENTS, SUPPORT_INTENTS)
}


def get_template(template: "str | PromptTemplate | Mapping[str, Any] | None" = None) -> PromptTemplate:
    """A template from a preset name, a mapping of fields (``{"preset": name, ...overrides}``), or as is.

    ``None`` gives :data:`DEFAULT`.
    """
    if template is None:
        return DEFAULT
    if isinstance(template, PromptTemplate):
        return template
    if isinstance(template, str):
        try:
            return TEMPLATES[template]
        except KeyError:
            raise ValueError(f"unknown template {template!r}; presets: {sorted(TEMPLATES)}") from None
    if isinstance(template, Mapping):
        fields = dict(template)
        base = get_template(fields.pop("preset", None))
        if "labels" in fields and fields["labels"] is not None:
            fields["labels"] = tuple(fields["labels"])
        unknown = set(fields) - set(PromptTemplate.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown template fields {sorted(unknown)}")
        return replace(base, **fields)
    raise TypeError(f"template must be a preset name, a mapping or a PromptTemplate, got {type(template).__name__}")
