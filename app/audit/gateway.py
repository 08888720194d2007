"""HTTP to a remote gateway under audit: the client, retries with back-off, typed failures.

A gateway that is down, slow or overloaded fails the audit as the gateway's failure,
not the auditor's: connection errors, timeouts and 5xx answers are retried with
exponential back-off (:class:`RetryPolicy`), then raise :class:`TargetUnavailableError`
naming the URL and what happened; a 4xx answer (a refused key, a spent budget, a
bad request) raises :class:`TargetError` at once, with the gateway's own message.

Retrying a ``POST`` the gateway may already have served (a read timeout) can spend one
more answer of the audit's dataset budget, or register a dataset twice: harmless for
an audit, whose datasets are its own, with a budget sized for it.

An answer is read up to ``MAX_ANSWER_BYTES`` (decoded) and within ``READ_DEADLINE_FACTOR`` x the
client's read timeout in all: the audited gateway's bytes are untrusted input, and neither an endless
body nor one dripped a byte at a time may hold an audit worker (a longer answer is a TargetError; a
slower one counts as a timeout, retried like one).

The client takes an optional ``transport`` so that the caller (the job layer) can put
its egress policy under every connection; this library knows no policy.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

# A private answer, white-box internals included, is a few kilobytes (esa's noisy and clean means:
# 2 x 384 floats); far more is a broken or hostile gateway.
MAX_ANSWER_BYTES = 8 * 2**20
READ_DEADLINE_FACTOR = 4.0  # the whole answer within this many read timeouts (30 s without one)
_DROPPED_HEADERS = ("content-encoding", "content-length", "transfer-encoding")


class _SlowAnswer(httpx.ReadTimeout):
    """The answer's bytes kept arriving past the read deadline (each within the read timeout)."""


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` tries in all; before try k+1 wait ``min(max_backoff, backoff * 2**(k-1))`` seconds (longer
    when a 5xx answer asks for it with ``Retry-After``, up to ``max_backoff``)."""

    attempts: int = 4
    backoff_seconds: float = 0.25
    max_backoff_seconds: float = 8.0

    def delay(self, failures: int) -> float:
        return min(self.max_backoff_seconds, self.backoff_seconds * 2 ** (failures - 1))


class TargetError(RuntimeError):
    """The gateway answered with an error that a retry would not change (4xx, or not the expected JSON)."""

    def __init__(self, message: str, *, url: str, status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status


class TargetUnavailableError(TargetError):
    """The gateway could not be reached, timed out or answered 5xx on every attempt."""


def gateway_client(base_url: str, api_key: str | None, timeout: float, transport: Any = None) -> httpx.Client:
    """An httpx client for a gateway (bearer key when given; ``transport``: e.g. one that enforces an egress policy)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout, transport=transport,
                        follow_redirects=False, trust_env=transport is None)


def _error_message(r: httpx.Response) -> str:
    try:
        err = r.json()["error"]
        return f"{err.get('message')} (param {err.get('param')})"
    except Exception:
        return (r.text or r.reason_phrase or "").strip()[:300]


def _what_happened(exc: httpx.TransportError, timeout: float | None) -> str:
    text = str(exc)
    if isinstance(exc, _SlowAnswer):
        return f"timed out: {text}"
    if isinstance(exc, httpx.TimeoutException):
        phase = {httpx.ConnectTimeout: "connecting", httpx.ReadTimeout: "waiting for the answer",
                 httpx.WriteTimeout: "sending", httpx.PoolTimeout: "waiting for a connection"}.get(type(exc), "")
        return f"timed out{' ' + phase if phase else ''}{f' (timeout {timeout:g}s)' if timeout else ''}"
    if isinstance(exc, httpx.ConnectError):
        if "refused" in text.lower():
            return "connection refused"
        return f"cannot connect ({text})" if text else "cannot connect"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def gateway_json(r: httpx.Response, what: str) -> dict[str, Any]:
    """The JSON body of a successful answer, or TargetError naming the gateway's status and message."""
    url = str(r.request.url) if r.request is not None else "?"
    if r.status_code >= 400:
        raise TargetError(f"{what}: gateway {url} answered HTTP {r.status_code}: {_error_message(r)}",
                          url=url, status=r.status_code)
    try:
        return r.json()
    except ValueError:
        raise TargetError(f"{what}: gateway {url} answered HTTP {r.status_code} with a body that is not JSON",
                          url=url, status=r.status_code) from None


def _post_bounded(client: httpx.Client, path: str, body: dict[str, Any], what: str, url: str) -> httpx.Response:
    """``client.post`` with the answer read up to MAX_ANSWER_BYTES and within the read deadline (module doc)."""
    timeout = client.timeout.read
    limit_s = READ_DEADLINE_FACTOR * (timeout if timeout else 30.0)
    deadline = time.monotonic() + limit_s
    with client.stream("POST", path, json=body) as r:
        data = bytearray()
        for chunk in r.iter_bytes():  # decoded: a compressed bomb counts what it expands to
            data += chunk
            if len(data) > MAX_ANSWER_BYTES:
                raise TargetError(f"{what}: gateway {url} answered more than {MAX_ANSWER_BYTES} bytes "
                                  f"(HTTP {r.status_code}); not read further", url=url, status=r.status_code)
            if time.monotonic() > deadline:
                raise _SlowAnswer(f"the answer was still arriving after {limit_s:g}s", request=r.request)
    headers = [(k, v) for k, v in r.headers.items() if k.lower() not in _DROPPED_HEADERS]
    return httpx.Response(r.status_code, headers=headers, content=bytes(data), request=r.request)


def gateway_post(client: httpx.Client, path: str, body: dict[str, Any], what: str, retry: RetryPolicy | None = None,
                 expect: tuple[str, ...] = (), sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """POST ``body`` to ``path``; transport errors and 5xx are retried per ``retry``, then TargetUnavailableError.
    An answer that is not an object with the ``expect`` keys is a TargetError."""
    retry = retry or RetryPolicy()
    url = f"{str(client.base_url).rstrip('/')}{path}"
    timeout = client.timeout.read
    for attempt in range(1, retry.attempts + 1):
        try:
            r = _post_bounded(client, path, body, what, url)
        except httpx.TransportError as exc:
            happened, reached = _what_happened(exc, timeout), False
        else:
            if r.status_code < 500:
                return _require(gateway_json(r, what), expect, what, url)
            happened, reached = f"HTTP {r.status_code}: {_error_message(r)}", True
        if attempt < retry.attempts:
            wait = retry.delay(attempt)
            if reached:  # a 503's Retry-After (seconds) is honoured, within the policy's cap
                try:
                    wait = min(retry.max_backoff_seconds, max(wait, float(r.headers.get("Retry-After", ""))))
                except ValueError:
                    pass
            sleep(wait)
    tries = f"{retry.attempts} attempt{'s' if retry.attempts != 1 else ''}"
    state = "unavailable" if reached else "unreachable"
    raise TargetUnavailableError(f"gateway {url} {state} after {tries}: {happened} ({what})", url=url)


def _require(out: Any, keys: tuple[str, ...], what: str, url: str) -> dict[str, Any]:
    """``out`` when it is an object with ``keys``; else TargetError (the gateway does not speak dpicl's API)."""
    if not isinstance(out, dict) or any(k not in out for k in keys):
        got = sorted(out) if isinstance(out, dict) else type(out).__name__
        raise TargetError(f"{what}: gateway {url} answered without {', '.join(keys)} (got {got})", url=url)
    return out
