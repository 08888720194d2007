"""Response schemas of the HTTP API, and the enumerations request models take.

The response models describe, for the OpenAPI document, exactly what each route in
``app/api/routes`` answers; they change no body. Routes that return a dict declare them as
``response_model`` with ``response_model_exclude_unset=True``: the dict is validated (a
route that drifts from its schema fails loudly) and serialized with the keys it had, no
key added (an optional key left out stays out) and none removed (open-ended blocks,
``privacy``, ``internals``, a job's ``result``, keep ``extra="allow"``). Routes that return
a ``Response`` (an answer with its budget headers, a 202 with ``Location``) are documented
by the same models; FastAPI does not re-serialize a ``Response``.

Request enumerations: mechanism names come from the registries (``app.mechanisms``,
``app.mechanisms.generation``) and adjacency from ``app.privacy.adjacency.Adjacency``, each
as one tuple the ``Literal`` is built from (tests/api/test_schemas.py checks the tuples
against the registries). A value is first put in its canonical spelling by the registry's
own parser (``"RNM"``, ``"private-voting"``, ``"clip-softmax"``, ``"add_remove"`` are
accepted as before); an unknown one is a 422 naming the field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from app.mechanisms import get_mechanism, mechanism_names
from app.mechanisms.errors import MechanismParamError
from app.mechanisms.generation import generation_mechanism_names, get_generation_mechanism
from app.jobs.registry import Verdict
from app.jobs.repository import STATUSES as JOB_STATUSES
from app.privacy.adjacency import Adjacency as _Adjacency
from app.privacy.errors import PrivacyInputError

# ---------------------------------------------------------------------------
# Request enumerations
# ---------------------------------------------------------------------------

CLASSIFY_MECHANISMS: tuple[str, ...] = tuple(mechanism_names())
GENERATE_MECHANISMS: tuple[str, ...] = tuple(generation_mechanism_names())
# The chat gateway serves either registry (the dataset's task picks one).
CHAT_MECHANISMS: tuple[str, ...] = tuple(sorted(set(CLASSIFY_MECHANISMS) | set(GENERATE_MECHANISMS)))
ADJACENCIES: tuple[str, ...] = tuple(a.value for a in _Adjacency)


def _canonical(*parsers: Callable[[str], str]) -> Callable[[Any], Any]:
    def canon(v: Any) -> Any:
        if not isinstance(v, str):
            return v  # the Literal refuses it, naming the field
        for parse in parsers:
            try:
                return parse(v)
            except (MechanismParamError, PrivacyInputError, ValueError):
                continue
        return v

    return canon


if TYPE_CHECKING:  # mypy cannot read a Literal built at run time
    ClassifyMechanism = str
    GenerateMechanism = str
    ChatMechanism = str
    AdjacencyName = str
else:
    ClassifyMechanism = Annotated[Literal[CLASSIFY_MECHANISMS],
                                  BeforeValidator(_canonical(lambda v: get_mechanism(v).name))]
    GenerateMechanism = Annotated[Literal[GENERATE_MECHANISMS],
                                  BeforeValidator(_canonical(lambda v: get_generation_mechanism(v).name))]
    ChatMechanism = Annotated[Literal[CHAT_MECHANISMS], BeforeValidator(_canonical(
        lambda v: get_mechanism(v).name, lambda v: get_generation_mechanism(v).name))]
    AdjacencyName = Annotated[Literal[ADJACENCIES], BeforeValidator(_canonical(lambda v: _Adjacency.parse(v).value))]


# ---------------------------------------------------------------------------
# Response building blocks
# ---------------------------------------------------------------------------


class _Out(BaseModel):
    """A response object with a fixed set of keys."""

    model_config = ConfigDict(extra="forbid")


class _Open(BaseModel):
    """A response object whose keys depend on the mechanism, kind or operation: the declared
    ones are described, any other is passed through."""

    model_config = ConfigDict(extra="allow")


# ---- service ----------------------------------------------------------------


class HealthAuth(_Out):
    mode: str = Field(description="open | keys (auto before the database answers)")
    warning: str | None


class HealthModels(_Out):
    configured: list[str]
    loaded: list[str]
    errors: dict[str, str]


class Health(_Out):
    status: Literal["ok", "unavailable"]
    auth: HealthAuth
    version: str
    ready: bool
    database: dict[str, Any] = Field(description="ok, dialect, revision and head (or error)")
    models: HealthModels
    extras: dict[str, Any]


class ModelObject(_Out):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    kind: str
    backend: str
    source: str | None
    default: bool
    capabilities: dict[str, Any]


class ModelList(_Out):
    object: Literal["list"]
    data: list[ModelObject]


# ---- privacy math -------------------------------------------------------------


class PrivacyCalibration(_Open):
    """``dpicl privacy calibrate --json``: the solved parameter and the guarantee it gives."""


class PrivacyConversion(_Open):
    """``dpicl privacy convert --json``: the converted guarantee."""


class PrivacyEmpirical(_Open):
    """``dpicl privacy empirical --json``: the empirical epsilon lower bound."""


# ---- datasets -----------------------------------------------------------------


class BudgetObject(_Out):
    epsilon: float
    delta: float
    adjacency: str
    epsilon_spent: float
    epsilon_remaining: float
    charges: int
    composition: str | None


class DatasetObject(_Out):
    id: str
    object: Literal["dataset"]
    name: str
    task: str
    labels: list[str]
    exemplar_count: int
    label_counts: dict[str, int]
    template: dict[str, Any]
    created_at: str | None
    answer_reuse: bool
    budget: BudgetObject | None
    visibility: str = Field(description="private (write-only exemplars) or public (a DP synthetic set)")
    provenance: dict[str, Any] | None


class DatasetList(_Out):
    object: Literal["list"]
    data: list[DatasetObject]
    total: int
    limit: int
    offset: int


class SampleObject(_Out):
    name: str
    object: Literal["sample"]
    task: Literal["classification", "generation"]
    description: str
    labels: list[str] | None
    exemplar_count: int
    example_queries: list[str]


class SampleList(_Out):
    object: Literal["list"]
    data: list[SampleObject]


class DatasetDeleted(_Out):
    id: str
    object: Literal["dataset"]
    deleted: Literal[True]


class Exemplar(_Out):
    input: str
    output: str


class ExemplarList(_Out):
    object: Literal["list"]
    dataset_id: str
    visibility: Literal["public"]
    total: int
    limit: int
    offset: int
    provenance: dict[str, Any] | None
    data: list[Exemplar]


class DatasetBudget(_Out):
    dataset_id: str
    object: Literal["budget"]
    epsilon: float
    delta: float
    adjacency: str
    epsilon_spent: float
    epsilon_remaining: float
    charges: int
    composition: str | None


class LedgerAccounting(_Out):
    orders: list[float]
    rdp: list[float | None] = Field(description="the charge's RDP curve on `orders` (null: +inf)")


class LedgerEntry(_Out):
    id: int
    object: Literal["ledger_entry"]
    created_at: str
    key_id: str | None
    mechanism: str
    params: dict[str, Any]
    epsilon: float
    delta: float
    idempotency_key: str | None
    status: str = Field(description="charged | refunded")
    refunded_at: str | None
    epsilon_spent_after: float | None
    accounting: LedgerAccounting | None


class LedgerList(_Out):
    object: Literal["list"]
    data: list[LedgerEntry]
    total: int
    limit: int
    offset: int


class ForecastBudget(_Out):
    epsilon: float
    delta: float
    epsilon_spent: float
    epsilon_remaining: float
    charges: int
    composition: str | None


class BudgetForecast(_Out):
    """``answers_remaining`` for a per-answer epsilon, or (``?answers=``) the largest per-answer
    epsilon at which that many answers fit. Keys after ``charged`` are present as the case needs."""

    object: Literal["budget.forecast"]
    dataset_id: str
    task: str
    mechanism: str
    params: dict[str, Any]
    adjacency: str
    budget: ForecastBudget
    composition: str
    assumes: str
    charged: bool
    per_answer: dict[str, Any] | None = Field(default=None, description="the cost of one answer")
    answers_remaining: int | None = None
    note: str | None = None
    answers_remaining_is_lower_bound: bool | None = None
    epsilon_spent_after: float | None = None
    composition_after: str | None = None
    answers: int | None = None
    epsilon: float | None = None
    epsilon_refused: float | None = None
    search: str | None = None


# ---- private answers ----------------------------------------------------------


class Noise(_Open):
    distribution: str
    parameter: str
    scale: Any


class AnswerPrivacy(_Open):
    """The answer's cost: epsilon, delta, adjacency, mechanism, its parameters, ``noise`` (the RDP
    curve only with ``?include=accounting``); the other keys are the mechanism's."""

    noise: Noise | None = None


class AnswerBudget(_Out):
    epsilon: float
    delta: float
    epsilon_spent: float
    epsilon_remaining: float


class AnswerReuse(_Out):
    ledger_entry_id: int
    first_released_at: str | None
    epsilon_charged: float
    why: str


class _Answer(_Open):
    """What every private answer carries, classification or generation."""

    dataset_id: str
    model: str
    mechanism: str
    privacy: AnswerPrivacy
    internals: dict[str, Any] | None = Field(default=None, description="only with return_internals")
    latency_ms: float
    reused: bool = False
    reuse: AnswerReuse | None = Field(default=None, description="only on a reused answer")


class ClassificationAnswer(_Answer):
    object: Literal["private.classification"]
    label: str
    synthetic_source: dict[str, Any] | None = Field(default=None, description="a public (synthetic) set's origin")
    budget: AnswerBudget | None = Field(description="null: not charged (zero_shot, a public set)")


class GenerationUsage(_Open):
    completion_tokens: int


class GenerationAnswer(_Answer):
    object: Literal["private.generation"]
    text: str
    finish_reason: str | None
    usage: GenerationUsage
    budget: AnswerBudget | None = Field(description="null: not charged (zero_shot)")


class MechanismInfo(_Out):
    name: str
    is_private: bool


class MechanismList(_Out):
    object: Literal["list"]
    data: list[MechanismInfo]


class GenerationMechanismInfo(_Out):
    name: str
    is_private: bool
    params: list[str]
    needs_embedder: bool
    description: str


class GenerationMechanismList(_Out):
    object: Literal["list"]
    data: list[GenerationMechanismInfo]


# ---- OpenAI-compatible ----------------------------------------------------------


class ChatMessageOut(_Out):
    role: Literal["assistant"]
    content: str


class ChatChoice(_Out):
    index: int
    message: ChatMessageOut
    finish_reason: str
    logprobs: None


class ChatUsage(_Out):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatDP(_Out):
    dataset_id: str
    mechanism: str | None
    privacy: AnswerPrivacy | None
    budget: AnswerBudget | None
    reused: bool
    reuse: AnswerReuse | None = Field(default=None, description="only on a reused answer")
    internals: dict[str, Any] | None = Field(default=None, description="only with return_internals")


class ChatCompletion(_Out):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str | None
    choices: list[ChatChoice]
    usage: ChatUsage
    dp: ChatDP


# ---- audits -----------------------------------------------------------------


class JobProgress(_Out):
    fraction: float
    message: str | None


class JobErrorInfo(_Out):
    message: str
    code: str | None


class ArtifactObject(_Out):
    name: str
    media_type: str
    bytes: int
    url: str


class JobWebhook(_Out):
    url: str
    status: str | None
    attempts: int | None


if TYPE_CHECKING:
    JobStatus = str
else:
    JobStatus = Literal[JOB_STATUSES]


class JobRunningRef(_Out):
    id: str
    kind: str


class JobQueue(_Out):
    position: int = Field(description="1: the next job a runner takes")
    ahead: int
    queued: int = Field(description="jobs queued now, of every tenant")
    running: int = Field(description="jobs running now, of every tenant")
    slots: int | None = Field(description="jobs this server runs at a time (DPICL_JOB_CONCURRENCY); "
                                          "null where `dpicl worker` processes run them")
    running_jobs: list[JobRunningRef] = Field(description="the caller's own running jobs (others are counted)")
    waiting_for: str = Field(description="a free job slot: position, slots busy and by which jobs")


class AuditJob(_Open):
    id: str
    object: Literal["audit.job"]
    url: str
    kind: str
    status: JobStatus
    progress: JobProgress
    config: dict[str, Any] | None = Field(
        default=None, description="as submitted, credentials redacted and every inline text (dataset.exemplars, "
        "canary.text, signals, a query or template given as an object...) replaced by a summary "
        "{omitted, count, chars, hmac_sha256}, never the text; absent in a listing (GET the job for it)")
    claimed_epsilon: float | None
    claimed_delta: float | None
    verdict: Verdict | None
    verdict_reason: str | None
    result: dict[str, Any] | None = Field(description="the kind's result (its own keys)")
    error: JobErrorInfo | None
    cancel_requested: bool
    attempts: int
    max_attempts: int
    created_at: str | None
    started_at: str | None
    finished_at: str | None
    heartbeat_at: str | None
    artifacts: list[ArtifactObject]
    webhook: JobWebhook | None
    queue: JobQueue | None = Field(default=None, description="queued jobs: its place in the queue and what it "
                                                             "waits for")


class AuditJobList(_Out):
    object: Literal["list"]
    data: list[AuditJob]
    has_more: bool
    first_id: str | None
    last_id: str | None


class AuditKind(_Out):
    object: Literal["audit.kind"]
    name: str
    description: str
    config_schema: dict[str, Any]


class AuditKindList(_Out):
    object: Literal["list"]
    data: list[AuditKind]


class AuditPlan(_Open):
    """The planner's answer (canary_mia): candidate designs, trials, predicted calls and time."""


class ArtifactList(_Out):
    object: Literal["list"]
    data: list[ArtifactObject]
