"""Private exemplar sets: write-only. Exemplar text never appears in a response, error or log."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from app.api.deps import RuntimeDep, TenantDep
from app.api.errors import APIError, validation_error
from app.store import datasets_repo as repo

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])

JSONL_TYPES = ("application/x-ndjson", "application/jsonl", "application/x-jsonlines")


class TemplateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    instruction: str | None = Field(default=None, max_length=2000)
    input_prefix: str | None = Field(default=None, max_length=200)
    output_prefix: str | None = Field(default=None, max_length=200)


class ExemplarIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input: str
    output: str


class DatasetMeta(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    task: Literal["classification", "generation"] = "classification"
    labels: list[str] | None = Field(default=None, max_length=100)
    template: TemplateIn | None = None

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        if len(v) < 2:
            raise ValueError("a classification set needs at least 2 labels")
        cleaned = [s.strip() for s in v]
        if any(not s for s in cleaned):
            raise ValueError("labels must be non-empty strings")
        if len(set(cleaned)) != len(cleaned):
            raise ValueError("labels must be unique")
        return cleaned

    @model_validator(mode="after")
    def _task_labels(self) -> "DatasetMeta":
        if self.task == "classification" and not self.labels:
            raise ValueError("labels: required for task 'classification'")
        return self


class DatasetCreate(DatasetMeta):
    exemplars: list[ExemplarIn] = Field(min_length=1)


DEFAULT_TEMPLATES: dict[str, dict[str, Any]] = {
    "classification": {
        "instruction": "Classify the text into one of the given labels.",
        "input_prefix": "Text:",
        "output_prefix": "Label:",
    },
    "generation": {"instruction": "Answer the question.", "input_prefix": "Input:", "output_prefix": "Output:"},
}


def default_template(task: str) -> dict[str, Any]:
    return dict(DEFAULT_TEMPLATES[task])


def dataset_object(ds) -> dict[str, Any]:
    return {
        "id": ds.id,
        "object": "dataset",
        "name": ds.name,
        "task": ds.task,
        "labels": ds.labels,
        "exemplar_count": ds.exemplar_count,
        "label_counts": ds.label_counts,
        "template": ds.template,
        "created_at": ds.created_at.isoformat() if isinstance(ds.created_at, datetime) else ds.created_at,
    }


def _validate_exemplars(meta: DatasetMeta, exemplars: list[ExemplarIn], settings) -> list[tuple[str, str]]:
    """Check sizes and labels. Messages name the exemplar index, never its text."""
    if len(exemplars) > settings.max_exemplars:
        raise APIError(422, f"too many exemplars: {len(exemplars)} > {settings.max_exemplars} (DPICL_MAX_EXEMPLARS)",
                       param="exemplars", code="too_many_exemplars")
    labels = set(meta.labels or [])
    out: list[tuple[str, str]] = []
    for i, ex in enumerate(exemplars):
        inp, outp = ex.input.strip(), ex.output.strip()
        if not inp:
            raise APIError(422, f"exemplar {i}: input is empty", param=f"exemplars.{i}.input", code="empty_input")
        if len(inp) > settings.max_exemplar_chars:
            raise APIError(422, f"exemplar {i}: input longer than {settings.max_exemplar_chars} characters "
                           "(DPICL_MAX_EXEMPLAR_CHARS)", param=f"exemplars.{i}.input", code="input_too_long")
        if meta.task == "classification" and outp not in labels:
            raise APIError(422, f"exemplar {i}: output is not one of the labels", param=f"exemplars.{i}.output",
                           code="unknown_label")
        if meta.task == "generation" and not outp:
            raise APIError(422, f"exemplar {i}: output is empty", param=f"exemplars.{i}.output", code="empty_output")
        if len(outp) > settings.max_exemplar_chars:
            raise APIError(422, f"exemplar {i}: output longer than {settings.max_exemplar_chars} characters",
                           param=f"exemplars.{i}.output", code="output_too_long")
        out.append((inp, outp))
    return out


def _error_from_validation(exc: ValidationError, prefix: str = "") -> APIError:
    return validation_error(list(exc.errors()), prefix)


def _parse_jsonl(raw: bytes) -> tuple[DatasetMeta, list[ExemplarIn]]:
    """Line 1: the metadata object (the JSON form without ``exemplars``); each later line: one exemplar."""
    lines = [ln for ln in raw.decode("utf-8", errors="strict").splitlines() if ln.strip()]
    if not lines:
        raise APIError(422, "empty JSONL body: line 1 must hold the dataset metadata", param="body")
    try:
        meta = DatasetMeta.model_validate(json.loads(lines[0]))
    except json.JSONDecodeError:
        raise APIError(422, "line 1 is not valid JSON", param="body") from None
    except ValidationError as exc:
        raise _error_from_validation(exc) from None
    exemplars = []
    for i, line in enumerate(lines[1:]):
        try:
            exemplars.append(ExemplarIn.model_validate(json.loads(line)))
        except json.JSONDecodeError:
            raise APIError(422, f"exemplar {i} (line {i + 2}) is not valid JSON", param=f"exemplars.{i}") from None
        except ValidationError as exc:
            raise _error_from_validation(exc, prefix=f"exemplars.{i}.") from None
    if not exemplars:
        raise APIError(422, "no exemplars after the metadata line", param="exemplars")
    return meta, exemplars


@router.post("", status_code=201)
async def create_dataset(request: Request, rt: RuntimeDep, tenant: TenantDep):
    """Register a private exemplar set (JSON body, or JSONL with Content-Type application/x-ndjson)."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    raw = await request.body()
    if ctype in JSONL_TYPES:
        try:
            meta, exemplars = _parse_jsonl(raw)
        except UnicodeDecodeError:
            raise APIError(422, "body is not UTF-8", param="body") from None
    elif ctype in ("application/json", ""):
        try:
            body = DatasetCreate.model_validate_json(raw)
        except ValidationError as exc:
            raise _error_from_validation(exc) from None
        meta, exemplars = body, body.exemplars
    else:
        raise APIError(415, f"unsupported content type {ctype!r}: use application/json or application/x-ndjson",
                       param="content-type")
    rows = _validate_exemplars(meta, exemplars, rt.settings)
    template = default_template(meta.task)
    if meta.template is not None:
        template.update({k: v for k, v in meta.template.model_dump().items() if v is not None})

    def _store():
        with rt.db.session() as s:
            ds = repo.create_dataset(s, tenant_id=tenant, name=meta.name, task=meta.task, labels=meta.labels or [],
                                     template=template, exemplars=rows)
            s.commit()
            return dataset_object(ds)

    return await run_in_threadpool(_store)


@router.get("")
async def list_datasets(
    rt: RuntimeDep,
    tenant: TenantDep,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
):
    def _list():
        with rt.db.session() as s:
            rows, total = repo.list_datasets(s, tenant, limit=limit, offset=offset)
            return {"object": "list", "data": [dataset_object(d) for d in rows], "total": total,
                    "limit": limit, "offset": offset}

    return await run_in_threadpool(_list)


@router.get("/{dataset_id}")
async def get_dataset(dataset_id: str, rt: RuntimeDep, tenant: TenantDep):
    def _get():
        with rt.db.session() as s:
            ds = repo.get_dataset(s, dataset_id, tenant)
            return dataset_object(ds) if ds else None

    obj = await run_in_threadpool(_get)
    if obj is None:
        raise APIError(404, f"dataset {dataset_id!r} not found", param="dataset_id", code="dataset_not_found")
    return obj


@router.delete("/{dataset_id}")
async def delete_dataset(dataset_id: str, rt: RuntimeDep, tenant: TenantDep):
    def _delete():
        with rt.db.session() as s:
            ok = repo.delete_dataset(s, dataset_id, tenant)
            s.commit()
            return ok

    if not await run_in_threadpool(_delete):
        raise APIError(404, f"dataset {dataset_id!r} not found", param="dataset_id", code="dataset_not_found")
    return {"id": dataset_id, "object": "dataset", "deleted": True}
