"""Private exemplar sets: write-only. Exemplar text never appears in a response, error or log."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import ConfigDict, Field, ValidationError

from app.api.json_route import JSONRoute
from app.badtext import BadTextError
from app.jsonbody import BodyValueError, JSONBody, loads

from app.answers.dataset_cache import dataset_cache
from app.api.deps import Offset, RuntimeDep, TenantDep
from app.api.errors import APIError, dataset_not_found, duplicate_key_error, json_error_reason, validation_error
from app.api.input_guard import CODE as BAD_TEXT
from app.api.auth import SCOPES, require
from app.api.schemas import (
    DatasetBudget,
    DatasetDeleted,
    DatasetList,
    DatasetObject,
    ExemplarList,
    LedgerList,
)
from app.store import budget_repo
from app.store import datasets_repo as repo

from app.api.dataset_schemas import BudgetIn, DatasetCreate, DatasetMeta, ExemplarIn, TemplateIn  # noqa: F401
from app.api.dataset_service import (  # noqa: F401 - re-exported for older imports
    budget_object,
    dataset_object,
    default_template,
    ledger_entry_object,
    store_dataset,
)

router = APIRouter(route_class=JSONRoute, prefix="/v1/datasets", tags=["datasets"])

JSONL_TYPES = ("application/x-ndjson", "application/jsonl", "application/x-jsonlines")


def _check_count(n: int, settings) -> None:
    """Before any exemplar is validated: 1.5 million exemplars (60 MB, under the upload limit) took a worker
    ~40 s of validation before this count refused them."""
    if n > settings.max_exemplars:
        raise APIError(422, f"too many exemplars: {n} > {settings.max_exemplars} (DPICL_MAX_EXEMPLARS)",
                       param="exemplars", code="too_many_exemplars")


def _validate_exemplars(meta: DatasetMeta, exemplars: list[ExemplarIn], settings) -> list[tuple[str, str]]:
    """Check sizes and labels. Messages name the exemplar index, never its text."""
    _check_count(len(exemplars), settings)
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


def _parse_jsonl(raw: bytes, settings) -> tuple[DatasetMeta, list[ExemplarIn]]:
    """Line 1: the metadata object (the JSON form without ``exemplars``); each later line: one exemplar.
    Errors name the line (1-based, blank lines counted) and the field, never the text."""
    # Lines end at "\n" only: str.splitlines() would also split inside a JSON string at U+2028 or U+0085.
    numbered = [(n, ln) for n, ln in enumerate(raw.decode("utf-8", errors="strict").split("\n"), start=1)
                if ln.strip()]
    if not numbered:
        raise APIError(422, "empty JSONL body: line 1 must hold the dataset metadata", param="body")
    n0, first = numbered[0]
    _check_count(len(numbered) - 1, settings)
    try:
        meta = DatasetMeta.model_validate(loads(first))
    except BodyValueError as exc:
        raise duplicate_key_error(exc, f"line {n0}: ") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise APIError(422, f"line {n0} is not valid JSON: {json_error_reason(exc, in_line=True)}", param="body",
                       code="invalid_value") from None
    except ValidationError as exc:
        raise _error_from_validation(exc) from None
    except BadTextError as exc:
        raise APIError(422, f"line {n0}: {exc}", param=exc.param, code=BAD_TEXT) from None
    exemplars = []
    for i, (n, line) in enumerate(numbered[1:]):
        try:
            exemplars.append(ExemplarIn.model_validate(loads(line)))
        except BodyValueError as exc:
            raise duplicate_key_error(exc.prefixed(f"exemplars.{i}."), f"line {n}: ") from None
        except (json.JSONDecodeError, RecursionError) as exc:
            raise APIError(422, f"exemplar {i} (line {n}) is not valid JSON: {json_error_reason(exc, in_line=True)}",
                           param=f"exemplars.{i}", code="invalid_value") from None
        except ValidationError as exc:
            raise _error_from_validation(exc, prefix=f"exemplars.{i}.") from None
        except BadTextError as exc:
            # json.loads turns "\ud800" into a lone surrogate that pydantic's python mode keeps.
            bad = exc.prefixed(f"exemplars.{i}.")
            raise APIError(422, f"line {n}: {bad}", param=bad.param, code=BAD_TEXT) from None
    if not exemplars:
        raise APIError(422, "no exemplars after the metadata line", param="exemplars")
    return meta, exemplars


@router.post("", status_code=201, response_model=DatasetObject, response_model_exclude_unset=True,
             dependencies=[Depends(require("admin"))])
async def create_dataset(request: Request, rt: RuntimeDep, tenant: TenantDep):
    """Register a private exemplar set (JSON body, or JSONL with Content-Type application/x-ndjson)."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    raw = await request.body()
    if ctype in JSONL_TYPES:
        try:
            meta, exemplars = _parse_jsonl(raw, rt.settings)
        except UnicodeDecodeError:
            raise APIError(422, "body: not UTF-8 text", param="body", code="invalid_value") from None
    elif ctype in ("application/json", ""):
        # json.loads, then the model, as FastAPI parses every other body and as the JSONL lines are:
        # an escaped lone surrogate reaches JSONBody's text check (pydantic's JSON parser would
        # refuse it without naming the field).
        try:
            data = loads(raw)
        except BodyValueError as exc:
            raise duplicate_key_error(exc) from None
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError; nesting past the stack
            raise APIError(422, f"body: not valid JSON: {json_error_reason(exc)}", param="body",
                           code="invalid_value") from None
        if isinstance(data, dict) and isinstance(data.get("exemplars"), list):
            _check_count(len(data["exemplars"]), rt.settings)
        try:
            body = DatasetCreate.model_validate(data)
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
        return store_dataset(rt, tenant, meta, rows, template)

    return await run_in_threadpool(_store)


@router.get("", response_model=DatasetList, response_model_exclude_unset=True, dependencies=[Depends(require(*SCOPES))])
async def list_datasets(
    rt: RuntimeDep,
    tenant: TenantDep,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Offset = 0,
):
    def _list():
        with rt.db.session() as s:
            rows, total = repo.list_datasets(s, tenant, limit=limit, offset=offset)
            data = [dataset_object(d, budget_repo.get_account(s, d.id, tenant)) for d in rows]
            return {"object": "list", "data": data, "total": total,
                    "limit": limit, "offset": offset}

    return await run_in_threadpool(_list)


@router.get("/{dataset_id}", response_model=DatasetObject, response_model_exclude_unset=True,
            dependencies=[Depends(require(*SCOPES))])
async def get_dataset(dataset_id: str, rt: RuntimeDep, tenant: TenantDep):
    def _get():
        with rt.db.session() as s:
            ds = repo.get_dataset(s, dataset_id, tenant)
            return dataset_object(ds, budget_repo.get_account(s, ds.id, tenant)) if ds else None

    obj = await run_in_threadpool(_get)
    if obj is None:
        raise dataset_not_found(dataset_id)
    return obj


class DatasetPatch(JSONBody):
    model_config = ConfigDict(extra="forbid")
    answer_reuse: bool | None = Field(default=None, description="false: identical requests are charged again")


@router.patch("/{dataset_id}", response_model=DatasetObject, response_model_exclude_unset=True,
              dependencies=[Depends(require("admin"))])
async def patch_dataset(dataset_id: str, body: DatasetPatch, rt: RuntimeDep, tenant: TenantDep):
    """Change a dataset's settings (``answer_reuse``). Exemplars and labels are fixed once registered."""

    def _patch():
        with rt.db.session() as s:
            ds = repo.get_dataset(s, dataset_id, tenant)
            if ds is None:
                return None
            if body.answer_reuse is not None:
                ds.answer_reuse = body.answer_reuse
            s.commit()
            return dataset_object(ds, budget_repo.get_account(s, ds.id, tenant))

    obj = await run_in_threadpool(_patch)
    if obj is None:
        raise dataset_not_found(dataset_id)
    return obj


@router.delete("/{dataset_id}", response_model=DatasetDeleted, response_model_exclude_unset=True,
               dependencies=[Depends(require("admin"))])
async def delete_dataset(dataset_id: str, rt: RuntimeDep, tenant: TenantDep):
    def _delete():
        with rt.db.session() as s:
            ok = repo.delete_dataset(s, dataset_id, tenant)
            s.commit()
            return ok

    if not await run_in_threadpool(_delete):
        raise dataset_not_found(dataset_id)
    dataset_cache(rt).forget(dataset_id)  # other replicas refuse it from their read of the row
    return {"id": dataset_id, "object": "dataset", "deleted": True}


@router.get("/{dataset_id}/exemplars", response_model=ExemplarList, response_model_exclude_unset=True,
            dependencies=[Depends(require(*SCOPES))])
async def list_exemplars(
    dataset_id: str,
    rt: RuntimeDep,
    tenant: TenantDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
    offset: Annotated[int, Query(ge=0)] = 0,
):
    """The exemplars of a PUBLIC set (a DP synthetic set: its text is DP output, readable in full).
    A private set's exemplars never come back: 403."""

    def _get():
        with rt.db.session() as s:
            ds = repo.get_dataset(s, dataset_id, tenant)
            if ds is None:
                return None
            if (ds.visibility or "private") != "public":
                return "private"
            rows = repo.load_exemplars(s, dataset_id)
            return {"object": "list", "dataset_id": dataset_id, "visibility": "public", "total": len(rows),
                    "limit": limit, "offset": offset, "provenance": ds.provenance,
                    "data": [{"input": a, "output": b} for a, b in rows[offset:offset + limit]]}

    obj = await run_in_threadpool(_get)
    if obj is None:
        raise dataset_not_found(dataset_id)
    if obj == "private":
        raise APIError(403, f"dataset {dataset_id!r} is private: its exemplars are write-only", param="dataset_id",
                       code="dataset_private")
    return obj


@router.get("/{dataset_id}/budget", response_model=DatasetBudget, response_model_exclude_unset=True,
            dependencies=[Depends(require(*SCOPES))])
async def get_budget(dataset_id: str, rt: RuntimeDep, tenant: TenantDep):
    def _get():
        with rt.db.session() as s:
            return budget_object(budget_repo.get_account(s, dataset_id, tenant))

    obj = await run_in_threadpool(_get)
    if obj is None:
        raise dataset_not_found(dataset_id)
    return {"dataset_id": dataset_id, "object": "budget", **obj}


class BudgetUpdate(JSONBody):
    model_config = ConfigDict(extra="forbid")
    epsilon: float = Field(gt=0, allow_inf_nan=False)
    delta: float | None = Field(default=None, gt=0, lt=1, allow_inf_nan=False)


@router.put("/{dataset_id}/budget", response_model=DatasetBudget, response_model_exclude_unset=True,
            dependencies=[Depends(require("admin"))])
async def set_budget(dataset_id: str, body: BudgetUpdate, rt: RuntimeDep, tenant: TenantDep):
    """An admin sets a new total budget. Spent epsilon is recomposed at the new delta."""
    from app.budget.composition import compose
    from app.budget.ledger import state_of

    def _set():
        with rt.db.session() as s:
            acc = budget_repo.lock_account(s, dataset_id, tenant)
            if acc is None:
                return None
            acc.epsilon_budget = body.epsilon
            if body.delta is not None and body.delta != acc.delta_budget:
                acc.delta_budget = body.delta
                acc.epsilon_spent, acc.composition_method = compose(state_of(acc), body.delta)
            s.commit()
            return budget_object(acc)

    obj = await run_in_threadpool(_set)
    if obj is None:
        raise dataset_not_found(dataset_id)
    return {"dataset_id": dataset_id, "object": "budget", **obj}


@router.get("/{dataset_id}/ledger", response_model=LedgerList, response_model_exclude_unset=True,
            dependencies=[Depends(require(*SCOPES))])
async def list_ledger(
    dataset_id: str,
    rt: RuntimeDep,
    tenant: TenantDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Offset = 0,
):
    """Ledger entries, oldest first (append-only; refunds are marked, never removed)."""

    def _list():
        with rt.db.session() as s:
            acc = budget_repo.get_account(s, dataset_id, tenant)
            if acc is None:
                return None
            rows, total = budget_repo.list_entries(s, dataset_id, limit=limit, offset=offset)
            data = [
                # The charge's RDP curve on the account's order grid, as the ledger composed it
                # (null values: +inf; no curve: composed by basic composition).
                {**ledger_entry_object(e),
                 "accounting": {"orders": list(acc.rdp_orders), "rdp": e.rdp} if e.rdp is not None else None}
                for e in rows
            ]
            return {"object": "list", "data": data, "total": total, "limit": limit, "offset": offset}

    obj = await run_in_threadpool(_list)
    if obj is None:
        raise dataset_not_found(dataset_id)
    return obj
