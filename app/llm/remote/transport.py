"""Remote backend: errors, the per-tenant cache salt, options, and the HTTP transport (retries, back-off)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import random
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit


from ..errors import LLMError, ModelLoadError
from ..tenancy import tenant_scope
from ..types import ModelSpec

log = logging.getLogger(__name__)

MAX_LOGPROB_TOKEN_IDS = 128  # vLLM's cap on logprob_token_ids per request
_RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_REFUSED_STATUSES = frozenset({429, 503})  # the server did not start the work: safe to resend anything
_FLOOR = -9999.0  # vLLM writes -inf log-probabilities as -9999.0


# --------------------------------------------------------------------------- errors


class RemoteError(LLMError):
    """The server failed, refused, or answered something this client cannot read.

    ``public`` is what may leave the process (an API error, a log line): it never quotes the server's
    answer. An answer to a private request can hold the prompt, exemplars included (an OpenAI-style
    server's request-validation error echoes its input; a completion with ``echo`` holds the prompt), and
    a context-length refusal counts the prompt's tokens. ``str(exc)`` keeps the server's words for a
    developer at hand (tests, a debugger)."""

    def __init__(self, message: str, *, status: int | None = None, public: str | None = None):
        super().__init__(message)
        self.status = status
        self.public = message if public is None else public


class RemoteTimeout(RemoteError, TimeoutError):
    """The server did not answer in time (after the retries an idempotent request gets)."""


# ------------------------------------------------------------------ cache salt


# One tenant scope for every backend (app/llm/tenancy.py): within cache_salt_scope(t), remote
# requests share the server's prefix cache with t's requests only.
cache_salt_scope = tenant_scope


# --------------------------------------------------------------------- options


_CAPABILITY_NAMES = (
    "tokenize",
    "chat_template",
    "generation",
    "full_vocab_logprobs",
    "prompt_logprobs",
    "logprob_token_ids",
    "embeddings",
)


def public_url(url: str | None) -> str | None:
    """A URL without its credentials (``user:password@``), query or fragment: what an error, a log line or the
    public GET /v1/models may show of a model server's address (its host stays). Not a URL: unchanged."""
    if not url or "://" not in url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))



@dataclass(frozen=True)
class RemoteOptions:
    """``ModelSpec.options`` of a remote model (all optional but the URL).

    base_url            the OpenAI base URL, e.g. ``http://vllm:8000/v1`` (default: ``spec.source``)
    served_model_name   the server's name for the model (default: the one model it serves)
    api_key             bearer token; or ``api_key_env``: the environment variable holding it
    max_concurrency     requests in flight per model (default 8)
    timeout             seconds per request attempt (default 60); ``connect_timeout`` (default min(10, timeout))
    max_retries         extra attempts for a retryable failure (default 3)
    backoff, backoff_max  first and largest back-off in seconds (default 0.5, 8); a Retry-After header wins
    cache_salt          secret key for per-tenant salts (default: random per process);
                        ``"off"`` sends no salt (servers without prefix caching or without the field)
    discover            probe the server's capabilities at load (default true)
    capabilities        declared capabilities, ``{name: bool}``; with ``discover`` a declared true that
                        the probe refutes fails the load, a declared false switches a feature off
    max_context, vocab_size, eos_token_ids   declared facts (discovered where the server tells)
    startup_timeout     seconds to wait at load for a server that is still starting (default 0)
    embed_batch_size    texts per /v1/embeddings request (default 64)
    max_batch_tokens    the server's tokens per batch (vLLM's --max-num-batched-tokens; default 8192): one
                        private answer may run twice this (DPICL_MAX_ANSWER_TOKENS overrides; docs/security.md)
    """

    base_url: str
    served_model_name: str | None = None
    api_key: str | None = field(default=None, repr=False)
    max_concurrency: int = 8
    timeout: float = 60.0
    connect_timeout: float = 10.0
    max_retries: int = 3
    backoff: float = 0.5
    backoff_max: float = 8.0
    cache_salt: str | None = field(default=None, repr=False)
    salt_off: bool = False
    discover: bool = True
    declared: dict[str, bool] = field(default_factory=dict)
    max_context: int | None = None
    vocab_size: int | None = None
    eos_token_ids: tuple[int, ...] | None = None
    startup_timeout: float = 0.0
    embed_batch_size: int = 64
    max_batch_tokens: int = 8192

    @property
    def public_url(self) -> str:
        """``base_url`` without the credentials a URL may carry (``user:password@``), for messages and logs."""
        return public_url(self.base_url) or ""

    @property
    def root_url(self) -> str:
        """The server root (where vLLM serves /tokenize): the base URL without a trailing /v1."""
        parts = urlsplit(self.base_url)
        path = parts.path.rstrip("/")
        path = path.removesuffix("/v1")
        return urlunsplit((parts.scheme, parts.netloc, path, "", ""))

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> RemoteOptions:
        opts = dict(spec.options or {})
        known = {
            "base_url", "served_model_name", "api_key", "api_key_env", "max_concurrency", "timeout",
            "connect_timeout", "max_retries", "backoff", "backoff_max", "cache_salt", "discover",
            "capabilities", "max_context", "vocab_size", "eos_token_ids", "startup_timeout", "embed_batch_size",
            "max_batch_tokens",
        }
        unknown = sorted(set(opts) - known)
        if unknown:
            raise ModelLoadError(
                f"model {spec.name!r}: unknown option(s) {', '.join(map(repr, unknown))} for the remote backend "
                f"(known: {', '.join(sorted(known))})"
            )

        def bad(name: str, why: str) -> ModelLoadError:
            return ModelLoadError(f"model {spec.name!r}: option {name!r} {why}")

        base_url = str(opts.get("base_url") or spec.source or "").strip()
        if not base_url.startswith(("http://", "https://")):
            raise ModelLoadError(
                f"model {spec.name!r}: backend 'remote' needs the server's OpenAI base URL in source or "
                f"options.base_url, such as http://127.0.0.1:8000/v1 (got {base_url!r})"
            )
        base_url = base_url.rstrip("/")

        def num(name: str, default: Any, kind: Callable[[Any], Any] = float, lo: float | None = None) -> Any:
            v = opts.get(name, default)
            if v is None:
                return None
            try:
                v = kind(v)
            except (TypeError, ValueError):
                raise bad(name, f"must be a number (got {opts.get(name)!r})") from None
            if isinstance(v, float) and not math.isfinite(v):
                raise bad(name, "must be finite")
            if lo is not None and v < lo:
                raise bad(name, f"must be >= {lo} (got {v})")
            return v

        api_key = opts.get("api_key")
        if opts.get("api_key_env"):
            env = str(opts["api_key_env"])
            if env not in os.environ:
                raise bad("api_key_env", f"names {env!r}, which is not set in the environment")
            api_key = os.environ[env]
        timeout = num("timeout", 60.0, lo=0.001)
        declared = opts.get("capabilities") or {}
        if not isinstance(declared, dict) or any(not isinstance(v, bool) for v in declared.values()):
            raise bad("capabilities", "must be an object of {capability: true|false}")
        unknown_caps = sorted(set(declared) - set(_CAPABILITY_NAMES))
        if unknown_caps:
            raise bad("capabilities", f"names unknown capabilities {unknown_caps} (known: {', '.join(_CAPABILITY_NAMES)})")
        salt = opts.get("cache_salt")
        salt_off = salt is False or (isinstance(salt, str) and salt.strip().lower() == "off")
        if salt is not None and not salt_off and (not isinstance(salt, str) or len(salt) < 16):
            raise bad("cache_salt", "must be a secret string of at least 16 characters, or \"off\"")
        eos = opts.get("eos_token_ids")
        if eos is not None:
            if isinstance(eos, int):
                eos = [eos]
            try:
                eos = tuple(int(t) for t in eos)
            except (TypeError, ValueError):
                raise bad("eos_token_ids", "must be a list of token ids") from None
        discover = opts.get("discover", True)
        if not isinstance(discover, bool):
            raise bad("discover", "must be true or false")
        return cls(
            base_url=base_url,
            served_model_name=(str(opts["served_model_name"]) if opts.get("served_model_name") else None),
            api_key=(str(api_key) if api_key else None),
            max_concurrency=num("max_concurrency", 8, int, lo=1),
            timeout=timeout,
            connect_timeout=num("connect_timeout", min(10.0, timeout), lo=0.001),
            max_retries=num("max_retries", 3, int, lo=0),
            backoff=num("backoff", 0.5, lo=0.0),
            backoff_max=num("backoff_max", 8.0, lo=0.0),
            cache_salt=None if salt_off else salt,
            salt_off=salt_off,
            discover=discover,
            declared=dict(declared),
            max_context=num("max_context", None, int, lo=1),
            vocab_size=num("vocab_size", None, int, lo=1),
            eos_token_ids=eos,
            startup_timeout=num("startup_timeout", 0.0, lo=0.0),
            embed_batch_size=num("embed_batch_size", 64, int, lo=1),
            max_batch_tokens=num("max_batch_tokens", 8192, int, lo=1),
        )


# ------------------------------------------------------------------- transport


def _finalize_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread, client: Any) -> None:
    if loop.is_closed():
        return
    with contextlib.suppress(Exception):
        asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(timeout=5)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)
    with contextlib.suppress(Exception):
        loop.close()


class Transport:
    """HTTP to one server: a private event loop thread, one ``httpx.AsyncClient``,
    a semaphore bounding the requests in flight, retries with back-off.

    Synchronous callers (the protocol is synchronous; the API calls it from a
    thread pool) submit coroutines with :meth:`run`; every thread shares the
    same connection pool and the same concurrency bound.
    """

    def __init__(self, opts: RemoteOptions, *, label: str):
        import httpx

        self.opts = opts
        self.label = label
        self.stats = {"requests": 0, "attempts": 0, "retries": 0}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"dpicl-remote-{label}", daemon=True)
        self._thread.start()
        headers = {"User-Agent": "dpicl-remote"}
        if opts.api_key:
            headers["Authorization"] = f"Bearer {opts.api_key}"
        limits = httpx.Limits(max_connections=opts.max_concurrency, max_keepalive_connections=opts.max_concurrency)
        timeout = httpx.Timeout(opts.timeout, connect=opts.connect_timeout)

        async def make() -> httpx.AsyncClient:
            return httpx.AsyncClient(headers=headers, timeout=timeout, limits=limits)

        self._client = asyncio.run_coroutine_threadsafe(make(), self._loop).result()
        self._sem = asyncio.run_coroutine_threadsafe(self._make_sem(), self._loop).result()
        self._finalizer = weakref.finalize(self, _finalize_loop, self._loop, self._thread, self._client)

    async def _make_sem(self) -> asyncio.Semaphore:
        return asyncio.Semaphore(self.opts.max_concurrency)

    def close(self) -> None:
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` on the transport's loop and wait for it (from any thread but the loop's own)."""
        if self.closed:
            coro.close()
            raise RemoteError(f"{self.label}: the remote model was closed")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("Transport.run called from its own event loop thread")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def gather(self, coros: Sequence[Awaitable[Any]]) -> list[Any]:
        """All results in order; the first failure cancels the rest and is raised."""
        tasks = [asyncio.ensure_future(c) for c in coros]
        if not tasks:
            return []
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            with contextlib.suppress(ValueError):
                return min(self.opts.backoff_max, max(0.0, float(retry_after)))
        cap = min(self.opts.backoff_max, self.opts.backoff * (2 ** attempt))
        return cap * (0.5 + 0.5 * random.random())  # "equal jitter": at least half the cap

    async def request(self, method: str, url: str, body: Any = None, *, idempotent: bool = True) -> Any:
        """One JSON request with retries. Raises RemoteTimeout / RemoteError with the server's message."""
        import httpx

        self.stats["requests"] += 1
        where = url.replace(self.opts.root_url, "") or url
        attempts = self.opts.max_retries + 1
        last: Exception | None = None
        for attempt in range(attempts):
            self.stats["attempts"] += 1
            retry_after = None
            try:
                async with self._sem:
                    resp = await self._client.request(method, url, json=body)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                # Never reached the server: resending is safe for every request.
                last = exc
                kind = "timeout" if isinstance(exc, httpx.TimeoutException) else "connect"
            except httpx.TimeoutException as exc:
                last = exc
                kind = "timeout"
                if not idempotent:
                    break
            except httpx.TransportError as exc:  # the connection broke mid-request
                last = exc
                kind = "transport"
                if not idempotent:
                    break
            else:
                if resp.status_code < 400:
                    try:
                        return resp.json()
                    except ValueError:
                        raise RemoteError(
                            f"{self.label}: {method} {where} answered {resp.status_code} with a body that is not JSON"
                        ) from None
                message = _error_message(resp)
                if resp.status_code in _RETRY_STATUSES and (idempotent or resp.status_code in _REFUSED_STATUSES):
                    last = RemoteError(f"HTTP {resp.status_code}: {message}", status=resp.status_code,
                                       public=f"HTTP {resp.status_code}")
                    kind = "status"
                    retry_after = resp.headers.get("retry-after")
                else:
                    raise _status_error(self.label, method, where, resp.status_code, message)
            if attempt + 1 < attempts:
                self.stats["retries"] += 1
                delay = self._delay(attempt, retry_after)
                log.info("%s: %s %s failed (%s: %s); retry %d/%d in %.2f s", self.label, method, where, kind,
                         last.public if isinstance(last, RemoteError) else last, attempt + 1, attempts - 1, delay)
                await asyncio.sleep(delay)
        tries = f"{attempt + 1} attempt{'s' if attempt else ''}"
        if isinstance(last, httpx.TimeoutException):
            phase = "connect" if isinstance(last, (httpx.ConnectTimeout, httpx.PoolTimeout)) else "answer"
            limit = self.opts.connect_timeout if phase == "connect" else self.opts.timeout
            raise RemoteTimeout(
                f"{self.label}: {method} {where} timed out ({phase} timeout {limit:g} s; {tries})"
            ) from None
        if isinstance(last, RemoteError):
            raise RemoteError(f"{self.label}: {method} {where} failed after {tries}: {last}", status=last.status,
                              public=f"{self.label}: {method} {where} failed after {tries}: {last.public}") from None
        raise RemoteError(f"{self.label}: cannot reach {url} ({type(last).__name__}: {last}; {tries})") from None


def first_choice(body: Any, what: str) -> dict[str, Any]:
    """``choices[0]`` of an OpenAI-style answer, or RemoteError saying the answer had none."""
    try:
        return body["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise RemoteError(f"the server's answer to {what} has no choices: {str(body)[:300]}",
                          public=f"the server's answer to {what} has no choices") from None


def _error_message(resp: Any) -> str:
    try:
        body = resp.json()
    except ValueError:
        return (resp.text or "").strip()[:500] or resp.reason_phrase
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or err)[:1000]
        if isinstance(err, str):
            return err[:1000]
        if "detail" in body:
            return str(body["detail"])[:1000]
    return str(body)[:1000]


def _status_error(label: str, method: str, where: str, status: int, message: str) -> RemoteError:
    if status in (401, 403):
        return RemoteError(f"{label}: the server refused the credentials (HTTP {status}; check api_key): {message}",
                           status=status, public=f"{label}: the server refused the credentials (HTTP {status}; "
                                                 "check api_key)")
    return RemoteError(f"{label}: {method} {where} answered HTTP {status}: {message}", status=status,
                       public=f"{label}: {method} {where} answered HTTP {status}")
