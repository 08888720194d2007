"""A small Python client for a dpicl server, sync (:class:`Client`) and async (:class:`AsyncClient`), on httpx.

    from app.client import Client

    with Client("http://127.0.0.1:8000", api_key="dpk_...") as dp:
        ds = dp.create_dataset("tickets", exemplars=[{"input": "...", "output": "billing"}], labels=["billing", "tech"])
        ans = dp.classify(ds["id"], "my card was charged twice", mechanism="rnm", epsilon=1.0)
        job = dp.wait_audit(dp.submit_audit("canary_mia", config, claimed_epsilon=1.0)["id"], timeout=600)

Every method is one HTTP call (``wait_audit`` polls) and returns the server's JSON as a dict; the paths and
request fields are those of ``/openapi.json`` (tests/client checks that against the live schema).

Errors raise a subclass of :class:`DpiclError` carrying the server's envelope (status, type, message, param,
code), so a caller can tell what to do next:

- :class:`BudgetExhausted` (429): the dataset's privacy budget refuses the answer, for good; it carries
  ``epsilon_spent`` / ``epsilon_remaining``. Never retried: retrying cannot succeed.
- :class:`InvalidRequest` (400, 413, 415, 422): fix the request; ``param`` names the field.
- :class:`AuthenticationError` (401), :class:`PermissionDenied` (403), :class:`NotFound` (404),
  :class:`Conflict` (409).
- :class:`Unavailable`: the service is overloaded (503; :class:`QueueFull`, a 429 ``queue_full`` for audit
  submissions, likewise), its model server failed (502 / 504), or it did not answer at all (``status`` 0:
  connection refused, timeout).

Retries, and why they are safe: only a 503 or a ``queue_full`` 429 (honouring ``Retry-After``) and transport
failures are retried,
with bounded back-off (``max_retries``, ``max_wait`` seconds between tries, and ``deadline``), and only for
requests the server deduplicates or that change nothing: GETs, the pure calculators, and POSTs that carry an
``Idempotency-Key``. Private answers and audit submissions always carry one (a fresh UUID unless you give your
own), so a retried answer is replayed by the server, never charged twice.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterable, Mapping, TypeVar

import httpx

__all__ = ["AsyncClient", "AuthenticationError", "BudgetExhausted", "Client", "Conflict", "DpiclError",
           "InvalidRequest", "NotFound", "PermissionDenied", "QueueFull", "TERMINAL", "Unavailable", "verdict_of"]

TERMINAL = ("succeeded", "failed", "cancelled")
T = TypeVar("T")


class DpiclError(Exception):
    """An error answer of the service (``status`` > 0) or no answer at all (``status`` 0). Subclasses say which."""

    def __init__(self, status: int, message: str, *, type: str | None = None, param: str | None = None,
                 code: str | None = None, body: Any = None) -> None:
        where = f" ({param})" if param else ""
        super().__init__(f"HTTP {status}{where}: {message}" if status else message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.body = body


class InvalidRequest(DpiclError):
    """400 / 413 / 415 / 422: the request is wrong; ``param`` names the field. Resending it cannot help."""


class AuthenticationError(DpiclError):
    """401: no key, or a key the server does not know (revoked, mistyped)."""


class PermissionDenied(DpiclError):
    """403: the key lacks a scope this call needs."""


class NotFound(DpiclError):
    """404: no such dataset / job / route, or one that belongs to another tenant."""


class Conflict(DpiclError):
    """409: e.g. an Idempotency-Key reused with a different request."""


class BudgetExhausted(DpiclError):
    """429: the dataset's privacy budget refuses this answer. Nothing was charged; it will refuse again until an
    admin raises the budget, so it is never retried. ``epsilon_remaining`` is what is left (None if unknown)."""

    def __init__(self, status: int, message: str, *, epsilon_spent: float | None = None,
                 epsilon_remaining: float | None = None, **kw: Any) -> None:
        super().__init__(status, message, **kw)
        self.epsilon_spent = epsilon_spent
        self.epsilon_remaining = epsilon_remaining


class Unavailable(DpiclError):
    """The service could not answer now: 503 (overloaded, a deadline passed; retried while the budget of retries
    lasts), 502 / 504 (its model server failed), or ``status`` 0 (no answer: connection refused, timeout)."""


class QueueFull(Unavailable):
    """429 ``queue_full``: the tenant has too many queued audit jobs; retried after ``Retry-After`` like a 503."""


_BY_STATUS: dict[int, type[DpiclError]] = {400: InvalidRequest, 401: AuthenticationError, 403: PermissionDenied,
                                           404: NotFound, 409: Conflict, 413: InvalidRequest, 415: InvalidRequest,
                                           422: InvalidRequest, 502: Unavailable, 503: Unavailable,
                                           504: Unavailable}


def _float_header(r: httpx.Response, name: str) -> float | None:
    try:
        return float(r.headers[name])
    except (KeyError, ValueError):
        return None


def verdict_of(job: Mapping[str, Any]) -> str | None:
    """``pass`` / ``violation`` / ``inconclusive`` of a finished audit job (None before it finishes).
    ``inconclusive`` means no violation was seen but the audit could not have seen one: read
    ``job["verdict_reason"]``; a CI gate should not treat it as a pass."""
    return job.get("verdict")


@dataclass(frozen=True)
class _Req(Generic[T]):
    method: str
    path: str
    json: Any = None
    params: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    retry: bool = False  # safe to resend (GET, pure, or deduplicated by Idempotency-Key)
    ok: tuple[int, ...] = (200,)
    parse: Callable[[httpx.Response], T] = lambda r: r.json()  # type: ignore[assignment, return-value]


def _error(r: httpx.Response) -> DpiclError:
    try:
        body = r.json()
        err = body["error"]
        message, kw = str(err.get("message")), {"type": err.get("type"), "param": err.get("param"),
                                                "code": err.get("code"), "body": body}
    except Exception:
        message, kw = r.text[:500], {}
    if r.status_code == 429 and kw.get("code") == "queue_full":
        return QueueFull(r.status_code, message, **kw)
    if r.status_code == 429:
        return BudgetExhausted(r.status_code, message, epsilon_spent=_float_header(r, "X-DPICL-Epsilon-Spent"),
                               epsilon_remaining=_float_header(r, "X-DPICL-Epsilon-Remaining"), **kw)
    return _BY_STATUS.get(r.status_code, DpiclError)(r.status_code, message, **kw)


def _retry_after(r: httpx.Response | None, default: float) -> float:
    value = r.headers.get("Retry-After") if r is not None else None
    try:
        return min(max(float(value), 0.05), 60.0) if value is not None else default
    except ValueError:
        return default


def _drop_none(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _key(idempotency_key: str | None) -> dict[str, str]:
    return {"Idempotency-Key": idempotency_key or f"sdk-{uuid.uuid4().hex}"}


class _Try(Generic[T]):
    """The retry policy of one call, shared by both clients: feed it each attempt's outcome; it answers
    (True, parsed value), or (False, seconds to wait before resending), or raises.

    Resent: only a 503 (the service is overloaded or a deadline passed before any work: nothing was charged) and
    transport failures, only for requests that are safe to resend, at most ``max_retries`` times, never waiting
    longer than ``max_wait`` at once nor past ``deadline``. Every other error is raised at once, typed."""

    def __init__(self, base_url: str, req: _Req[T], max_retries: int, deadline: float | None,
                 max_wait: float = 30.0) -> None:
        self.base_url, self.req, self.deadline, self.max_wait = base_url, req, deadline, max_wait
        self.left = max(max_retries, 0) + 1 if req.retry else 1
        self.delay = 0.5
        self.last_error: DpiclError | None = None

    def step(self, r: httpx.Response | None, exc: Exception | None) -> tuple[bool, Any]:
        self.left -= 1
        if r is not None:
            if r.status_code in self.req.ok:
                return True, self.req.parse(r)
            error = _error(r)
            if not (self.req.retry and (r.status_code == 503 or isinstance(error, QueueFull))):
                raise error
        else:
            error = Unavailable(0, f"the service at {self.base_url} did not answer ({type(exc).__name__}: {exc})")
            if not self.req.retry:
                raise error from exc
        self.last_error = error
        wait = min(_retry_after(r, self.delay), self.max_wait)
        self.delay = min(self.delay * 2, self.max_wait)
        if self.deadline is not None:
            wait = min(wait, self.deadline - time.monotonic())
        if self.left <= 0 or wait < 0:
            raise error
        return False, wait


class _Wait:
    """The polling of ``wait_audit``, shared by both clients: ``step(job)`` answers None when the job is
    finished, else the seconds to wait (the server's Retry-After, else ``poll``); raises TimeoutError."""

    def __init__(self, job_id: str, timeout: float | None, poll: float,
                 on_progress: Callable[[dict[str, Any]], None] | None) -> None:
        self.job_id, self.timeout, self.poll, self.on_progress = job_id, timeout, poll, on_progress
        self.end = None if timeout is None else time.monotonic() + timeout

    def step(self, job: dict[str, Any], r: httpx.Response | None) -> float | None:
        if self.on_progress is not None:
            self.on_progress(job)
        if job["status"] in TERMINAL:
            return None
        pause = _retry_after(r, self.poll)
        if self.end is not None:
            left = self.end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"job {self.job_id} is still {job['status']} after {self.timeout:g} s")
            pause = min(pause, left)
        return pause


class _Endpoints:
    """The API, once: each method builds a request; the sync and async clients send it."""

    def _call(self, req: _Req[Any]) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    # -- health and models
    def health(self) -> Any:
        return self._call(_Req("GET", "/v1/health", retry=True))

    def models(self) -> Any:
        return self._call(_Req("GET", "/v1/models", retry=True))

    # -- datasets and budgets
    def create_dataset(self, name: str, exemplars: Iterable[Mapping[str, str]], *, labels: list[str] | None = None,
                       task: str = "classification", budget: Mapping[str, Any] | None = None,
                       template: Mapping[str, Any] | None = None) -> Any:
        body = _drop_none({"name": name, "task": task, "labels": labels, "budget": budget, "template": template,
                           "exemplars": [dict(e) for e in exemplars]})
        # Not retried: creating a dataset is not deduplicated by the server (a resend could make two).
        return self._call(_Req("POST", "/v1/datasets", json=body, ok=(201,)))

    def samples(self) -> Any:
        """The bundled sample tasks (name, task, labels, exemplar_count, example_queries)."""
        return self._call(_Req("GET", "/v1/samples", retry=True))

    def load_sample(self, sample: str, *, name: str | None = None, budget: Mapping[str, Any] | None = None) -> Any:
        """Load a bundled sample task (``assistant_intents``, ``support_intents``, ``gen_dialogsum``) as a new
        private dataset of your tenant; returns the dataset object. Not retried (a resend could make two)."""
        body = _drop_none({"name": name, "budget": dict(budget) if budget else None})
        return self._call(_Req("POST", f"/v1/samples/{sample}/load", json=body, ok=(201,)))

    def list_datasets(self, *, limit: int | None = None, offset: int | None = None) -> Any:
        return self._call(_Req("GET", "/v1/datasets", params=_drop_none({"limit": limit, "offset": offset}),
                               retry=True))

    def get_dataset(self, dataset_id: str) -> Any:
        return self._call(_Req("GET", f"/v1/datasets/{dataset_id}", retry=True))

    def delete_dataset(self, dataset_id: str) -> Any:
        return self._call(_Req("DELETE", f"/v1/datasets/{dataset_id}", ok=(200, 204),
                               parse=lambda r: r.json() if r.content else None))

    def budget(self, dataset_id: str) -> Any:
        return self._call(_Req("GET", f"/v1/datasets/{dataset_id}/budget", retry=True))

    def set_budget(self, dataset_id: str, *, epsilon: float, delta: float) -> Any:
        # PUT is idempotent: sending the same total twice sets it once.
        return self._call(_Req("PUT", f"/v1/datasets/{dataset_id}/budget",
                               json={"epsilon": epsilon, "delta": delta}, retry=True))

    def budget_forecast(self, dataset_id: str, **params: Any) -> Any:
        """``mechanism``, ``epsilon``, ``delta``, ``partitions``, ... -> answers_remaining; ``answers=N`` -> the
        largest per-answer epsilon for N answers (composed exactly as the ledger composes)."""
        return self._call(_Req("GET", f"/v1/datasets/{dataset_id}/budget/forecast", params=_drop_none(params),
                               retry=True))

    def ledger(self, dataset_id: str, **params: Any) -> Any:
        return self._call(_Req("GET", f"/v1/datasets/{dataset_id}/ledger", params=_drop_none(params), retry=True))

    # -- private answers (always keyed: a retry is replayed, never charged twice)
    def classify(self, dataset_id: str, query: str, *, mechanism: str = "rnm", idempotency_key: str | None = None,
                 **fields: Any) -> Any:
        """``fields``: epsilon, delta, partitions, shots_per_partition, adjacency, calibrate, model,
        return_internals, seed, params (mechanism-specific) as in the API."""
        body = {"dataset_id": dataset_id, "query": query, "mechanism": mechanism, **_drop_none(fields)}
        return self._call(_Req("POST", "/v1/private/classify", json=body, headers=_key(idempotency_key),
                               retry=True))

    def generate(self, dataset_id: str, query: str, *, mechanism: str = "esa", idempotency_key: str | None = None,
                 **fields: Any) -> Any:
        """``fields``: epsilon, delta, adjacency, max_tokens, params, model, embedder, return_internals, seed."""
        body = {"dataset_id": dataset_id, "query": query, "mechanism": mechanism, **_drop_none(fields)}
        return self._call(_Req("POST", "/v1/private/generate", json=body, headers=_key(idempotency_key),
                               retry=True))

    def mechanisms(self) -> Any:
        return self._call(_Req("GET", "/v1/private/mechanisms", retry=True))

    # -- privacy calculators (pure)
    def calibrate(self, **body: Any) -> Any:
        return self._call(_Req("POST", "/v1/privacy/calibrate", json=body, retry=True))

    def convert(self, **body: Any) -> Any:
        return self._call(_Req("POST", "/v1/privacy/convert", json=body, retry=True))

    # -- audits
    def submit_audit(self, kind: str, config: Mapping[str, Any], *, claimed_epsilon: float | None = None,
                     claimed_delta: float | None = None, webhook_url: str | None = None,
                     idempotency_key: str | None = None) -> Any:
        body = _drop_none({"kind": kind, "config": dict(config), "claimed_epsilon": claimed_epsilon,
                           "claimed_delta": claimed_delta, "webhook_url": webhook_url})
        return self._call(_Req("POST", "/v1/audits", json=body, headers=_key(idempotency_key), retry=True,
                               ok=(200, 202)))

    def plan_audit(self, **body: Any) -> Any:
        return self._call(_Req("POST", "/v1/audits/plan", json=body, retry=True))

    def audit_kinds(self) -> Any:
        return self._call(_Req("GET", "/v1/audits/kinds", retry=True))

    def get_audit(self, job_id: str) -> Any:
        return self._call(_Req("GET", f"/v1/audits/{job_id}", retry=True))

    def list_audits(self, **params: Any) -> Any:
        return self._call(_Req("GET", "/v1/audits", params=_drop_none(params), retry=True))

    def cancel_audit(self, job_id: str) -> Any:
        # Cancelling twice is cancelling once.
        return self._call(_Req("POST", f"/v1/audits/{job_id}/cancel", retry=True, ok=(200, 202)))

    def artifacts(self, job_id: str) -> Any:
        return self._call(_Req("GET", f"/v1/audits/{job_id}/artifacts", retry=True))

    def artifact(self, job_id: str, name: str) -> Any:
        return self._call(_Req("GET", f"/v1/audits/{job_id}/artifacts/{name}", retry=True,
                               parse=lambda r: r.content))


def _headers(api_key: str | None, user_agent: str) -> dict[str, str]:
    key = api_key if api_key is not None else os.environ.get("DPICL_API_KEY")
    return {"User-Agent": user_agent, **({"Authorization": f"Bearer {key}"} if key else {})}


class Client(_Endpoints):
    """Synchronous client. ``api_key`` defaults to ``$DPICL_API_KEY``; ``max_retries`` resends of a 503 or a
    failed connection, each wait at most ``max_wait`` seconds; ``deadline`` (monotonic seconds) bounds the retries
    of every call (the CLI's --timeout)."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 30.0, max_retries: int = 4,
                 max_wait: float = 30.0, deadline: float | None = None, user_agent: str = "dpicl-client",
                 transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_retries, self.max_wait = max_retries, max_wait
        self.deadline = deadline
        self.http = httpx.Client(base_url=self.base_url, headers=_headers(api_key, user_agent), timeout=timeout,
                                 transport=transport)
        self.last_response: httpx.Response | None = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def _call(self, req: _Req[T]) -> T:
        attempt = _Try(self.base_url, req, self.max_retries, self.deadline, self.max_wait)
        while True:
            r, exc = None, None
            try:
                r = self.last_response = self.http.request(req.method, req.path, json=req.json, params=req.params,
                                                           headers=req.headers)
            except httpx.HTTPError as e:
                exc = e
            done, value = attempt.step(r, exc)
            if done:
                return value
            time.sleep(value)

    def wait_audit(self, job_id: str, *, timeout: float | None = None, poll: float = 1.0,
                   on_progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Poll until the job is succeeded, failed or cancelled; raise TimeoutError (the job keeps running)."""
        wait = _Wait(job_id, timeout, poll, on_progress)
        while True:
            job = self.get_audit(job_id)
            pause = wait.step(job, self.last_response)
            if pause is None:
                return job
            time.sleep(pause)


class AsyncClient(_Endpoints):
    """The same API for asyncio: every method is awaited."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 30.0, max_retries: int = 4,
                 max_wait: float = 30.0, deadline: float | None = None, user_agent: str = "dpicl-client",
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_retries, self.max_wait = max_retries, max_wait
        self.deadline = deadline
        self.http = httpx.AsyncClient(base_url=self.base_url, headers=_headers(api_key, user_agent),
                                      timeout=timeout, transport=transport)
        self.last_response: httpx.Response | None = None

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _call(self, req: _Req[T]) -> T:  # type: ignore[override]
        attempt = _Try(self.base_url, req, self.max_retries, self.deadline, self.max_wait)
        while True:
            r, exc = None, None
            try:
                r = self.last_response = await self.http.request(req.method, req.path, json=req.json,
                                                                 params=req.params, headers=req.headers)
            except httpx.HTTPError as e:
                exc = e
            done, value = attempt.step(r, exc)
            if done:
                return value
            await asyncio.sleep(value)

    async def wait_audit(self, job_id: str, *, timeout: float | None = None, poll: float = 1.0,
                         on_progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        wait = _Wait(job_id, timeout, poll, on_progress)
        while True:
            job = await self.get_audit(job_id)
            pause = wait.step(job, self.last_response)
            if pause is None:
                return job
            await asyncio.sleep(pause)
