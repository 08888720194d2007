"""One interface for every mechanism the answer service runs, classification and generation alike.

    mech = mechanism_for("classification", "rnm")        # or ("generation", "mozo")
    parsed = mech.parse_params({"epsilon": 1.0, "partitions": 4})
    event = mech.cost(parsed, n_exemplars=8)              # typed PrivacyCost, before any model work
    out = mech.run(parsed, AnswerInputs(lm, exemplars, query, labels), rng)
    out.release, out.event, out.internals

The two families keep their own library entry points (``Mechanism.classify`` in base.py,
``GenerationMechanism.run`` in generation.py: the audits and notebooks call them); this module puts
one protocol over both, so the service has one code path: parse, cost (a typed, immutable event
the ledger composes, as dp_accounting's ``DpEvent``), run (the release, the same typed event and
the internals a white-box audit reads).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from app.mechanisms.base import Mechanism as ClassificationMechanism
from app.mechanisms.base import get_mechanism
from app.mechanisms.errors import MechanismParamError
from app.mechanisms.gen_common import GenerationRequest
from app.mechanisms.generation import GenerationMechanism, get_generation_mechanism
from app.privacy.accountant import PrivacyCost

if TYPE_CHECKING:
    from app.llm.types import Embedder, LanguageModel

Task = Literal["classification", "generation"]
TASKS: tuple[Task, ...] = ("classification", "generation")


@dataclass(frozen=True)
class AnswerInputs:
    """What one answer reads: the model, the private exemplars ((input, output) pairs; empty when the
    mechanism reads none), the query, and the dataset's labels and prompt template."""

    lm: LanguageModel
    exemplars: Sequence[Any]
    query: str
    labels: Sequence[str] = ()
    template: Mapping[str, Any] | None = None
    embedder: Embedder | None = None


@dataclass(frozen=True)
class MechanismOutput:
    """A release and what it cost. ``event`` is the typed cost the ledger charges (None: the
    mechanism reads no private exemplar and is never charged); ``privacy`` is the same cost as the
    caller sees it (``PrivacyCost.to_dict`` plus display keys); ``details`` are task-specific
    (``label_index``; ``finish_reason`` and ``tokens``)."""

    release: str
    event: PrivacyCost | None
    privacy: dict[str, Any]
    internals: dict[str, Any]
    details: dict[str, Any] = field(default_factory=dict)


class AnswerMechanism(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def task(self) -> Task: ...

    @property
    def is_private(self) -> bool: ...

    @property
    def reads_exemplars(self) -> bool:
        """Whether an answer reads the private exemplars (what reads them is charged; zero_shot is not)."""
        ...

    def parse_params(self, params: Mapping[str, Any]) -> Any:
        """Validated parameters with defaults filled in (MechanismParamError names the field)."""
        ...

    def describe(self, parsed: Any) -> dict[str, Any]:
        """The resolved parameters as plain JSON (what makes two requests identical)."""
        ...

    def reported_cost(self, parsed: Any, n_exemplars: int) -> dict[str, Any]:
        """The same cost as the caller and the budget forecast see it (``PrivacyCost.to_dict`` plus display keys)."""
        ...

    def cost(self, parsed: Any, n_exemplars: int) -> PrivacyCost | None:
        """The cost of one answer before any model work (data-independent: public parameters and the
        exemplar count only); None when nothing private is read."""
        ...

    def run(self, parsed: Any, inputs: AnswerInputs, rng: np.random.Generator | None) -> MechanismOutput: ...


def typed(privacy: Mapping[str, Any], reads_exemplars: bool) -> PrivacyCost | None:
    """A mechanism's reported cost as the typed event: the one place in the answer path where a cost
    dict is read. None for a mechanism that reads nothing private (zero_shot: no adjacency at all)."""
    if not reads_exemplars:
        return None
    if privacy.get("epsilon") is None:  # a baseline with no guarantee reads them: an infinite cost, never fits
        return PrivacyCost(math.inf, float(privacy.get("delta") or 0.0), "add-remove", str(privacy.get("mechanism")),
                           dict(privacy.get("params") or {}))
    return PrivacyCost.from_dict(privacy)


class _Wrapped:
    """What both adapters read off the wrapped mechanism."""

    mech: ClassificationMechanism | GenerationMechanism

    @property
    def name(self) -> str:
        return self.mech.name

    @property
    def is_private(self) -> bool:
        return self.mech.is_private

    @property
    def reads_exemplars(self) -> bool:
        return self.mech.reads_exemplars


@dataclass(frozen=True)
class Classification(_Wrapped):
    """A classification mechanism (rnm, poe, the baselines) under the protocol."""

    mech: ClassificationMechanism
    task: Task = "classification"

    def parse_params(self, params: Mapping[str, Any]) -> Any:
        return self.mech.parse_params(params)

    def describe(self, parsed: Any) -> dict[str, Any]:
        return dict(parsed.to_dict())

    def reported_cost(self, parsed: Any, n_exemplars: int) -> dict[str, Any]:
        return self.mech.cost(parsed, n_exemplars=n_exemplars)

    def cost(self, parsed: Any, n_exemplars: int) -> PrivacyCost | None:
        return typed(self.reported_cost(parsed, n_exemplars), self.reads_exemplars)

    def run(self, parsed: Any, inputs: AnswerInputs, rng: np.random.Generator | None) -> MechanismOutput:
        res = self.mech.classify(inputs.lm, inputs.exemplars, inputs.query, inputs.labels, inputs.template,
                                 parsed, rng)
        full = res.to_dict()
        return MechanismOutput(res.label, typed(res.privacy, self.reads_exemplars), full["privacy"],
                               full["internals"], {"label_index": res.label_index, "mechanism": res.mechanism})


@dataclass(frozen=True)
class GenerationParams:
    """A generation answer's parameters: the privacy target and length beside the mechanism's own."""

    epsilon: float | None
    delta: float
    adjacency: str
    max_tokens: int
    template: Mapping[str, Any] | None
    params: Mapping[str, Any]

    def request(self, exemplars: Sequence[Any], query: str) -> GenerationRequest:
        return GenerationRequest.build(exemplars, query, epsilon=self.epsilon, delta=self.delta,
                                       adjacency=self.adjacency, max_tokens=self.max_tokens,
                                       template=self.template, params=self.params)


# The cost of a generation answer depends on the exemplar count, never on their text or the query:
# placeholders stand in for both when it is computed before any data is read.
_PLACEHOLDER: tuple[str, str] = ("x", "y")


@dataclass(frozen=True)
class Generation(_Wrapped):
    """A generation mechanism (esa, ksa, clip_softmax, poe, mozo, the baselines) under the protocol."""

    mech: GenerationMechanism
    task: Task = "generation"

    def parse_params(self, params: Mapping[str, Any]) -> GenerationParams:
        p = dict(params)
        epsilon = p.pop("epsilon", None)
        delta = p.pop("delta", None)
        adjacency = p.pop("adjacency", None) or "replace-one"
        max_tokens = p.pop("max_tokens", None) or 32
        template = p.pop("template", None)
        if self.is_private and epsilon is None:
            epsilon = 1.0
        parsed = GenerationParams(epsilon, 1e-6 if delta is None else delta, str(adjacency), max_tokens, template, p)
        req = parsed.request([_PLACEHOLDER], "q")  # validates the common fields (errors name them)
        return GenerationParams(req.epsilon, req.delta, req.adjacency, req.max_tokens, template, dict(req.params))

    def describe(self, parsed: GenerationParams) -> dict[str, Any]:
        return {"epsilon": parsed.epsilon, "delta": parsed.delta, "adjacency": parsed.adjacency,
                "max_tokens": parsed.max_tokens, **dict(parsed.params)}

    def reported_cost(self, parsed: GenerationParams, n_exemplars: int) -> dict[str, Any]:
        n = n_exemplars if self.reads_exemplars else 0
        return self.mech.cost(parsed.request([_PLACEHOLDER] * n, "q"))

    def cost(self, parsed: GenerationParams, n_exemplars: int) -> PrivacyCost | None:
        return typed(self.reported_cost(parsed, n_exemplars), self.reads_exemplars)

    def run(self, parsed: GenerationParams, inputs: AnswerInputs, rng: np.random.Generator | None) -> MechanismOutput:
        req = parsed.request(inputs.exemplars if self.reads_exemplars else [], inputs.query)
        res = self.mech.run(req, inputs.lm, inputs.embedder, rng)
        full = res.to_dict(include_internals=True)
        return MechanismOutput(res.text, typed(res.privacy, self.reads_exemplars), full["privacy"],
                               full["internals"], {"finish_reason": res.finish_reason, "tokens": res.tokens,
                                                   "mechanism": res.mechanism})


def mechanism_for(task: str, name: str) -> Classification | Generation:
    """The mechanism ``name`` of a task under the one protocol (UnknownMechanismError names ``mechanism``)."""
    if task == "classification":
        return Classification(get_mechanism(name))
    if task == "generation":
        return Generation(get_generation_mechanism(name))
    raise MechanismParamError(f"unknown task {task!r}; known: {', '.join(TASKS)}", param="task")
