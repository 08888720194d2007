"""``POST /v1/chat/completions`` in OpenAI's shape: the gateway for existing clients.

The DP parameters ride in extra body fields (``extra_body`` in the official client):
``dataset_id`` (required), ``mechanism``, ``epsilon``, ``delta``, ``partitions``,
``shots_per_partition``, ``adjacency``, ``calibrate``, ``return_internals``, ``seed``,
``reuse``, ``dp_params``. The last user message is the query. The response carries OpenAI's
fields plus a ``dp`` block with the cost and the remaining budget.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse
from pydantic import ConfigDict, Field, field_validator

from app.api.json_route import JSONRoute
from app.jsonbody import JSONBody

from app.answers import classify as answers_classify, generate as answers_generate
from app.answers.errors import InvalidRequest
from app.answers.flow import dataset_task
from app.answers.presentation import compact_privacy
from app.api.answer_http import QUERY_MAX_CHARS, IncludeQuery, answer_headers, client_gone
from app.api.auth import Principal, require
from app.api.deps import RuntimeDep
from app.api.errors import APIError
from app.api.schemas import AdjacencyName, ChatCompletion, ChatMechanism

router = APIRouter(route_class=JSONRoute, tags=["openai-compatible"])


# "Not blank": one character that is not whitespace, in a pattern both Python's re and the Rust
# regex of pydantic-core / JSON Schema validators read alike (Python's str.isspace also counts
# \x1c-\x1f, Unicode's White_Space does not).
NON_BLANK = r"[^\s\x1c-\x1f]"
_TEXT_PART = {"type": "object", "required": ["type", "text"],
              "properties": {"type": {"const": "text"}, "text": {"type": "string", "pattern": NON_BLANK}}}


def _blank(text: str) -> bool:
    return re.search(NON_BLANK, text) is None


class ContentPart(JSONBody):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class UserMessage(JSONBody):
    """A user turn: its text is a query, so it must not be blank (the last one is the query)."""

    model_config = ConfigDict(extra="allow")
    role: Literal["user"]
    content: Annotated[str, Field(min_length=1, pattern=NON_BLANK)] | Annotated[
        list[ContentPart], Field(min_length=1, json_schema_extra={"contains": _TEXT_PART})]

    @field_validator("content")
    @classmethod
    def _has_text(cls, v):
        if isinstance(v, list) and not any(p.type == "text" and p.text and not _blank(p.text) for p in v):
            raise ValueError("a user message needs a non-blank text part")
        return v


class OtherMessage(JSONBody):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None = None


ChatMessage = Annotated[UserMessage | OtherMessage, Field(discriminator="role")]


class ChatCompletionRequest(JSONBody):
    # OpenAI clients send fields we don't use (temperature, n, stream...): ignore unknown ones.
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1, json_schema_extra={
        "contains": {"type": "object", "required": ["role"], "properties": {"role": {"const": "user"}}}})
    max_tokens: int | None = Field(default=None, ge=1, le=4096)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=4096)
    stream: bool = Field(default=False, json_schema_extra={"enum": [False]},
                         description="not supported: a private answer is released whole, after its charge")
    n: int = Field(default=1, ge=1, le=1)
    # DP extensions
    dataset_id: str = Field(min_length=1, max_length=64)
    mechanism: ChatMechanism | None = Field(default=None, description="default: rnm on a classification set, "
                                                                      "esa on a generation set")
    epsilon: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    delta: float | None = Field(default=None, gt=0, lt=1, allow_inf_nan=False)
    partitions: int | None = Field(default=None, ge=1, le=1000)
    shots_per_partition: int | None = Field(default=None, ge=1, le=1000)
    adjacency: AdjacencyName | None = None
    calibrate: bool | None = None
    return_internals: bool = False
    seed: int | None = Field(default=None, ge=0, le=2**53 - 1, description="noise seed; only when DPICL_ALLOW_SEEDED_NOISE")
    reuse: bool = True
    dp_params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("messages")
    @classmethod
    def _a_user_turn(cls, v):
        if not any(m.role == "user" for m in v):
            raise ValueError("the last user message is the query: give at least one")
        return v


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.text or "" for p in content if isinstance(p, ContentPart) and p.type == "text")
    return ""


@router.post("/v1/chat/completions", response_model=ChatCompletion)
async def chat_completions(
    request: Request,
    body: ChatCompletionRequest,
    rt: RuntimeDep,
    principal: Annotated[Principal, Depends(require("infer"))],
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)] = None,
    include: IncludeQuery = None,
):
    if body.stream:
        raise APIError(422, "streaming is not supported: a private answer is released whole, after its charge",
                       param="stream", code="unsupported")
    users = [i for i, m in enumerate(body.messages) if m.role == "user"]
    query = _text(body.messages[users[-1]].content) if users else ""
    if not users or _blank(query):
        raise APIError(422, "the last user message is the query and must not be empty", param="messages")
    if len(query) > QUERY_MAX_CHARS:  # the bound of classify's and generate's query, before any model work
        raise APIError(422, f"the last user message is the query: at most {QUERY_MAX_CHARS} characters, got "
                            f"{len(query)}", param=f"messages.{users[-1]}.content", code="invalid_value")
    params = {**body.dp_params, **{k: getattr(body, k) for k in (
        "epsilon", "delta", "partitions", "shots_per_partition", "adjacency", "calibrate") if getattr(body, k) is not None}}
    model_name = body.model if body.model and body.model in rt.models else None
    if body.model and model_name is None:
        raise APIError(404, f"model {body.model!r} is not served here", param="model", code="model_not_found")

    try:
        task = await dataset_task(rt, principal, body.dataset_id)
        if task == "generation":
            ans = await answers_generate.generate(
                rt, principal, dataset_id=body.dataset_id, query=query, mechanism=body.mechanism or "esa",
                params=params, model=model_name, max_tokens=body.max_completion_tokens or body.max_tokens,
                return_internals=body.return_internals, seed=body.seed, idempotency_key=idempotency_key,
                reuse=body.reuse, client_gone=client_gone(request))
            content = ans.body.get("text", "")
        else:
            ans = await answers_classify.classify(
                rt, principal, dataset_id=body.dataset_id, query=query, mechanism=body.mechanism or "rnm", params=params,
                model=model_name, return_internals=body.return_internals, seed=body.seed, idempotency_key=idempotency_key,
                reuse=body.reuse, client_gone=client_gone(request))
            content = ans.body["label"]
    except InvalidRequest as exc:
        if exc.param == "query":  # the answer service's name for what is here the last user message
            exc.param = f"messages.{users[-1]}.content"
        raise
    b = ans.body
    out = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": b.get("model"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop",
                     "logprobs": None}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        "dp": {"dataset_id": body.dataset_id, "mechanism": b.get("mechanism"),
               "privacy": compact_privacy(b.get("privacy"), include == "accounting"),
               "budget": b.get("budget"), "reused": bool(b.get("reused")),
               **({"reuse": b["reuse"]} if "reuse" in b else {}),
               **({"internals": b["internals"]} if "internals" in b else {})},
    }
    return JSONResponse(out, headers=answer_headers(ans))
