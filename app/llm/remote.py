"""The remote backend (``backend="remote"``): a model behind an OpenAI-compatible server, first of all vLLM.

Configured like any other model (docs/vllm.md)::

    {"name": "smollm2-vllm", "kind": "lm", "backend": "remote",
     "source": "http://127.0.0.1:8001/v1",
     "options": {"served_model_name": "smollm2", "api_key_env": "VLLM_API_KEY"}}

``source`` (or ``options["base_url"]``) is the server's OpenAI base URL (ending
in ``/v1``); vLLM's own routes (``/tokenize``, ``/detokenize``) live beside it.

How each protocol call maps onto the server (all prompts travel as token ids,
tokenized with the server's ``/tokenize`` under the same BOS rule as the ``hf``
backend, so both backends score the very same tokens):

* ``next_token_logprobs``: ``/v1/completions`` with ``max_tokens=1``,
  ``logprobs=-1`` (the server runs with ``--max-logprobs -1``) and
  ``return_tokens_as_token_ids``: the whole vocabulary, keyed by token id.
* ``continuation_logprobs``: one-token continuations with ``logprob_token_ids``
  (all labels of one prompt in one request, at most 128 ids a request);
  longer ones with ``prompt_logprobs=0`` on prompt + continuation (teacher
  forced, one request per pair). Either route is exact; none is approximated.
* ``generate``: ``/v1/completions`` with explicit neutral sampling parameters
  (the server's generation config never leaks in) and ``return_token_ids``.
* ``start_decode``: a decode session that asks for the full next-token
  distribution of every live sequence at each step (no KV cache crosses HTTP;
  the server's prefix cache, salted per call, does that work). It hands out
  log-probabilities where the ``hf`` session hands out raw logits: they differ
  by one constant per row, which every mechanism here removes (max-shift or
  log-softmax).

Capabilities are probed once at load (``options["discover"]``, default on) and
may be declared in ``options["capabilities"]``; a call that needs a missing one
raises :class:`CapabilityError` naming it, never a silent approximation.

Batching: a protocol call fans out into concurrent requests on one private
event loop (httpx, at most ``max_concurrency`` in flight per model). Idempotent
requests are retried with exponential back-off and jitter on connection errors,
timeouts, 408/429/5xx; a request that could change what a caller sees (sampled
generation without a seed) is retried only when it never reached the server.

Prefix-cache isolation (vLLM's ``cache_salt``; CVE-2025-46570): every request
carries a salt. Inside :func:`cache_salt_scope` it is derived from the tenant
(HMAC with the ``cache_salt`` option, or a per-process random key), so one
tenant's requests share cache blocks and never another tenant's. Outside any
scope each protocol call gets a fresh random salt: nothing is shared across
calls at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import hmac
import json
import logging
import math
import os
import random
import secrets
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from .errors import CapabilityError, LLMError, ModelLoadError
from .types import Capabilities, Generation, ModelSpec

log = logging.getLogger(__name__)

MAX_LOGPROB_TOKEN_IDS = 128  # vLLM's cap on logprob_token_ids per request
_RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_REFUSED_STATUSES = frozenset({429, 503})  # the server did not start the work: safe to resend anything
_FLOOR = -9999.0  # vLLM writes -inf log-probabilities as -9999.0


# --------------------------------------------------------------------------- errors


class RemoteError(LLMError):
    """The server failed, refused, or answered something this client cannot read."""

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


class RemoteTimeout(RemoteError, TimeoutError):
    """The server did not answer in time (after the retries an idempotent request gets)."""


# ------------------------------------------------------------------ cache salt


_TENANT: contextvars.ContextVar[str | None] = contextvars.ContextVar("dpicl_remote_tenant", default=None)


@contextlib.contextmanager
def cache_salt_scope(tenant: str | None) -> Iterator[None]:
    """Within this block, remote requests share the prefix cache with ``tenant``'s requests only."""
    token = _TENANT.set(None if tenant is None else str(tenant))
    try:
        yield
    finally:
        _TENANT.reset(token)


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

        def num(name: str, default, kind=float, lo=None):
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
        )


# ------------------------------------------------------------------- transport


def _finalize_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread, client) -> None:
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

        async def make():
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

    def run(self, coro: Awaitable[Any]) -> Any:
        """Run ``coro`` on the transport's loop and wait for it (from any thread but the loop's own)."""
        if self.closed:
            coro.close()  # type: ignore[union-attr]
            raise RemoteError(f"{self.label}: the remote model was closed")
        if threading.current_thread() is self._thread:
            coro.close()  # type: ignore[union-attr]
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
                    last = RemoteError(f"HTTP {resp.status_code}: {message}", status=resp.status_code)
                    kind = "status"
                    retry_after = resp.headers.get("retry-after")
                else:
                    raise _status_error(self.label, method, where, resp.status_code, message)
            if attempt + 1 < attempts:
                self.stats["retries"] += 1
                delay = self._delay(attempt, retry_after)
                log.info("%s: %s %s failed (%s: %s); retry %d/%d in %.2f s", self.label, method, where, kind,
                         last, attempt + 1, attempts - 1, delay)
                await asyncio.sleep(delay)
        tries = f"{attempt + 1} attempt{'s' if attempt else ''}"
        if isinstance(last, httpx.TimeoutException):
            phase = "connect" if isinstance(last, (httpx.ConnectTimeout, httpx.PoolTimeout)) else "answer"
            limit = self.opts.connect_timeout if phase == "connect" else self.opts.timeout
            raise RemoteTimeout(
                f"{self.label}: {method} {where} timed out ({phase} timeout {limit:g} s; {tries})"
            ) from None
        if isinstance(last, RemoteError):
            raise RemoteError(f"{self.label}: {method} {where} failed after {tries}: {last}", status=last.status) from None
        raise RemoteError(f"{self.label}: cannot reach {url} ({type(last).__name__}: {last}; {tries})") from None


def _error_message(resp) -> str:
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
                           status=status)
    return RemoteError(f"{label}: {method} {where} answered HTTP {status}: {message}", status=status)


# ------------------------------------------------------------------ capabilities


@dataclass(frozen=True)
class RemoteCapabilities(Capabilities):
    """:class:`Capabilities` plus what the remote backend negotiated with its server."""

    server: str = ""
    served_model_name: str = ""
    tokenize: bool = False
    prompt_logprobs: bool = False
    logprob_token_ids: bool = False
    cache_salt: bool = False
    # capability -> why it is missing (probe answer or "declared false")
    missing: dict[str, str] = field(default_factory=dict)


_HINTS = {
    "full_vocab_logprobs": "start vLLM with --max-logprobs -1",
    "continuation_scoring": "a vLLM server (prompt_logprobs or logprob_token_ids, and /tokenize) is needed",
    "tokenize": "the server needs vLLM's /tokenize and /detokenize routes",
    "chat_template": "serve a model with a chat template, or use a plain-text template",
    "generation": "the server must serve /v1/completions",
    "decode_session": "token-by-token mechanisms need full-vocabulary log-probabilities (--max-logprobs -1)",
    "embeddings": "serve an embedding model (vllm serve --task embed) and configure it as kind 'embedder'",
}


# --------------------------------------------------------------------- helpers


class _LRU:
    def __init__(self, size: int):
        self.size = size
        self._d: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            if key in self._d:
                self._d.move_to_end(key)
                return self._d[key]
        return None

    def put(self, key, value) -> None:
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.size:
                self._d.popitem(last=False)


def _token_key_id(key: str) -> int:
    # return_tokens_as_token_ids: keys are "token_id:123"
    try:
        return int(key.rsplit(":", 1)[1]) if key.startswith("token_id:") else int(key)
    except (ValueError, IndexError):
        raise RemoteError(f"cannot read a token id from the server's logprobs key {key!r}") from None


def _first_choice(body: Any, what: str) -> dict:
    try:
        return body["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise RemoteError(f"the server's answer to {what} has no choices: {str(body)[:300]}") from None


# ------------------------------------------------------------------ the model


class RemoteLanguageModel:
    """A causal LM served by an OpenAI-compatible server, behind the LanguageModel protocol."""

    backend = "remote"

    def __init__(self, spec: ModelSpec, opts: RemoteOptions, transport: Transport | None = None):
        self.name = spec.name
        self.spec = spec
        self.opts = opts
        self.transport = transport or Transport(opts, label=f"model {spec.name!r}")
        self.model_id: str = opts.served_model_name or ""
        self._salt_key = (opts.cache_salt or secrets.token_hex(32)).encode()
        self._tok_cache = _LRU(4096)
        self._bos_id: int | None = None
        self.eos_token_ids: frozenset[int] = frozenset(opts.eos_token_ids or ())
        self._max_context = opts.max_context
        self._vocab_size = opts.vocab_size
        self._have: dict[str, bool] = {}
        self._missing: dict[str, str] = {}
        self._caps: RemoteCapabilities | None = None

    # ---------------------------------------------------------------- set-up

    @property
    def _label(self) -> str:
        return f"model {self.name!r} (remote backend, {self.opts.base_url})"

    def _url(self, path: str) -> str:
        if path.startswith("/v1/"):
            return self.opts.base_url + path[len("/v1"):]
        return self.opts.root_url + path

    def _post(self, path: str, body: dict, *, idempotent: bool = True):
        return self.transport.request("POST", self._url(path), body, idempotent=idempotent)

    def connect(self) -> RemoteLanguageModel:
        """Find the served model, then probe (or take as declared) what the server can do."""
        self.transport.run(self._connect())
        return self

    async def _wait_models(self) -> dict:
        deadline = time.monotonic() + self.opts.startup_timeout
        while True:
            try:
                return await self.transport.request("GET", self._url("/v1/models"))
            except RemoteError as exc:
                if exc.status in (401, 403) or time.monotonic() >= deadline:
                    raise
                log.info("%s: waiting for the server (%s)", self._label, exc)
                await asyncio.sleep(min(2.0, max(0.1, deadline - time.monotonic())))

    async def _connect(self) -> None:
        try:
            listing = await self._wait_models()
        except RemoteError as exc:
            raise ModelLoadError(f"{self._label}: cannot list the server's models: {exc}") from None
        entries = [m for m in (listing.get("data") or []) if isinstance(m, dict)] if isinstance(listing, dict) else []
        ids = [str(m.get("id")) for m in entries]
        if not self.model_id:
            if len(ids) != 1:
                raise ModelLoadError(
                    f"{self._label}: the server serves {ids or 'no models'}; set options.served_model_name"
                )
            self.model_id = ids[0]
        elif self.model_id not in ids:
            raise ModelLoadError(
                f"{self._label}: the server does not serve {self.model_id!r} (it serves {ids}); "
                f"check options.served_model_name"
            )
        entry = entries[ids.index(self.model_id)]
        if self._max_context is None and isinstance(entry.get("max_model_len"), int):
            self._max_context = int(entry["max_model_len"])

        declared = self.opts.declared
        if not self.opts.discover:
            for name in _CAPABILITY_NAMES:
                default = name in ("generation",)
                self._have[name] = bool(declared.get(name, default))
                if not self._have[name]:
                    self._missing[name] = "declared false" if name in declared else "not declared (discover is off)"
            if self._have.get("tokenize"):
                await self._probe_bos()
            return

        probes: dict[str, Callable[[], Awaitable[None]]] = {
            "tokenize": self._probe_tokenize,
            "chat_template": self._probe_chat,
            "generation": self._probe_generation,
            "full_vocab_logprobs": self._probe_full_vocab,
            "prompt_logprobs": self._probe_prompt_logprobs,
            "logprob_token_ids": self._probe_label_ids,
        }
        for name, probe in probes.items():
            if declared.get(name) is False:
                self._have[name], self._missing[name] = False, "declared false"
                continue
            if name != "tokenize" and name != "generation" and not self._have.get("tokenize"):
                self._have[name], self._missing[name] = False, "needs tokenize"
                continue
            try:
                await probe()
                self._have[name] = True
            except (RemoteError, ValueError, KeyError, TypeError, IndexError) as exc:
                if isinstance(exc, RemoteError) and (exc.status is None or exc.status in (401, 403, 429)
                                                     or exc.status >= 500):
                    raise ModelLoadError(f"{self._label}: capability probe {name!r} failed: {exc}") from None
                if "cache_salt" in str(exc) and not self.opts.salt_off:
                    raise ModelLoadError(
                        f"{self._label}: the server rejects cache_salt ({exc}); without it the prefix cache is a "
                        "cross-tenant side channel. Use a vLLM with cache_salt, or set options.cache_salt to "
                        "\"off\" for a server without prefix caching"
                    ) from None
                self._have[name], self._missing[name] = False, str(exc)[:300]
            if declared.get(name) and not self._have[name]:
                raise ModelLoadError(
                    f"{self._label}: capability {name!r} is declared but the server lacks it: {self._missing[name]}"
                )
        self._have["embeddings"] = False
        self._missing["embeddings"] = "a language model (kind 'lm')"

    async def _tokenize_remote(self, text: str, add_special_tokens: bool) -> list[int]:
        body = await self._post("/tokenize", {"model": self.model_id, "prompt": text,
                                              "add_special_tokens": add_special_tokens})
        return [int(t) for t in body["tokens"]]

    async def _probe_bos(self) -> None:
        plain = await self._tokenize_remote("x", False)
        special = await self._tokenize_remote("x", True)
        if len(special) > len(plain) and special[1:1 + len(plain)] == plain and special[0] not in plain[:1]:
            self._bos_id = int(special[0])

    async def _probe_tokenize(self) -> None:
        await self._probe_bos()
        ids = await self._plain_ids("Hello world")
        body = await self._post("/detokenize", {"model": self.model_id, "tokens": ids})
        if body.get("prompt") != "Hello world":
            raise ValueError(f"/detokenize does not invert /tokenize ({body.get('prompt')!r})")
        if not self.eos_token_ids:
            self.eos_token_ids = await self._discover_eos()

    async def _discover_eos(self) -> frozenset[int]:
        # vLLM's optional /tokenizer_info (--enable-tokenizer-info-endpoint) names the EOS token.
        with contextlib.suppress(RemoteError, ValueError, KeyError, TypeError):
            info = await self.transport.request("GET", self._url("/tokenizer_info"))
            eos = info.get("eos_token")
            if isinstance(eos, dict):
                eos = eos.get("content")
            if isinstance(eos, str) and eos:
                ids = await self._tokenize_remote(eos, False)
                if len(ids) == 1:
                    return frozenset(ids)
        return frozenset()

    async def _probe_chat(self) -> None:
        await self._chat_ids([{"role": "user", "content": "hi"}], True)

    def _salt(self, call_salt: str | None) -> dict:
        if self.opts.salt_off:
            return {}
        tenant = _TENANT.get()
        if tenant is not None:
            return {"cache_salt": hmac.new(self._salt_key, tenant.encode(), hashlib.sha256).hexdigest()}
        return {"cache_salt": call_salt or secrets.token_hex(32)}

    def _completion_body(self, prompt_ids: list[int], salt: dict, **extra) -> dict:
        body = {
            "model": self.model_id,
            "prompt": prompt_ids,
            "max_tokens": 1,
            "temperature": 0.0,
            "top_p": 1.0,
            "top_k": 0,
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "add_special_tokens": False,
            "return_tokens_as_token_ids": True,
            **salt,
        }
        body.update(extra)
        return body

    async def _probe_generation(self) -> None:
        if self._have.get("tokenize"):
            ids = self._bos(await self._plain_ids("Hello"))
            body = self._completion_body(ids, self._salt(None), max_tokens=1, return_token_ids=True)
        else:  # standard OpenAI fields only
            body = {"model": self.model_id, "prompt": "Hello", "max_tokens": 1, **self._salt(None)}
        _first_choice(await self._post("/v1/completions", body), "a generation probe")

    async def _probe_full_vocab(self) -> None:
        ids = await self._plain_ids("Hello")
        row = await self._next_lp_row(self._bos(ids), self._salt(None))
        if self._vocab_size is None:
            self._vocab_size = int(row.shape[0])

    async def _probe_prompt_logprobs(self) -> None:
        ids = self._bos(await self._plain_ids("Hello world"))
        lps = await self._prompt_token_logprobs(ids + ids, len(ids), self._salt(None))
        if len(lps) != len(ids) or not all(math.isfinite(x) for x in lps):
            raise ValueError("prompt_logprobs did not score the prompt's tokens")

    async def _probe_label_ids(self) -> None:
        ids = self._bos(await self._plain_ids("Hello"))
        want = ids[-1:]
        got = await self._label_lp(ids, want, self._salt(None))
        if set(got) != set(want):
            raise ValueError("logprob_token_ids did not return the requested ids")

    # ------------------------------------------------------------------ info

    def _has(self, name: str) -> bool:
        return bool(self._have.get(name))

    def capabilities(self) -> RemoteCapabilities:
        full = self._has("full_vocab_logprobs")
        cont = self._has("tokenize") and (self._has("prompt_logprobs") or self._has("logprob_token_ids") or full)
        missing = dict(self._missing)
        if not cont:
            missing.setdefault("continuation_scoring", "needs tokenize and one of prompt_logprobs, "
                                                        "logprob_token_ids, full_vocab_logprobs")
        if not full:
            missing.setdefault("decode_session", "needs full_vocab_logprobs")
        return RemoteCapabilities(
            backend=self.backend,
            full_vocab_logprobs=full,
            continuation_scoring=cont,
            generation=self._has("generation"),
            chat_template=self._has("chat_template"),
            embeddings=False,
            max_context=self._max_context,
            vocab_size=self._vocab_size,
            embedding_dim=None,
            device="remote",
            dtype="server",
            prefix_reuse=not self.opts.salt_off,
            decode_session=full and self._has("tokenize"),
            server=self.opts.base_url,
            served_model_name=self.model_id,
            tokenize=self._has("tokenize"),
            prompt_logprobs=self._has("prompt_logprobs"),
            logprob_token_ids=self._has("logprob_token_ids"),
            cache_salt=not self.opts.salt_off,
            missing=missing,
        )

    def require(self, capability: str, what: str) -> None:
        """Raise :class:`CapabilityError` naming ``capability`` when this model lacks it."""
        caps = asdict(self.capabilities())
        if caps.get(capability):
            return
        why = caps["missing"].get(capability, "not available")
        hint = _HINTS.get(capability, "")
        raise CapabilityError(
            f"{self._label} lacks the capability {capability!r} that {what} needs ({why})"
            + (f"; {hint}" if hint else "")
        )

    @property
    def vocab_size(self) -> int:
        self.require("full_vocab_logprobs", "the vocabulary size")
        return int(self._vocab_size or 0)

    # ------------------------------------------------------------ tokenizing

    def _bos(self, ids: list[int]) -> list[int]:
        if self._bos_id is not None and (not ids or ids[0] != self._bos_id):
            return [self._bos_id] + list(ids)
        return list(ids)

    async def _plain_ids(self, text: str) -> list[int]:
        hit = self._tok_cache.get(text)
        if hit is None:
            hit = tuple(await self._tokenize_remote(text, False))
            self._tok_cache.put(text, hit)
        return list(hit)

    def tokenize(self, text: str) -> list[int]:
        """Token ids of a prompt as every call here sends it (the hf backend's BOS rule)."""
        self.require("tokenize", "tokenize")
        return self._bos(self.transport.run(self._plain_ids(text)))

    def detokenize(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        self.require("tokenize", "detokenize")
        ids = [int(t) for t in token_ids]
        if skip_special_tokens:
            ids = [t for t in ids if t not in self.eos_token_ids and t != self._bos_id]
        if not ids:
            return ""
        body = self.transport.run(self._post("/detokenize", {"model": self.model_id, "tokens": ids}))
        return str(body["prompt"])

    async def _chat_ids(self, messages: list[dict], add_generation_prompt: bool) -> list[int]:
        body = await self._post("/tokenize", {"model": self.model_id, "messages": messages,
                                              "add_generation_prompt": add_generation_prompt,
                                              "add_special_tokens": False})
        return [int(t) for t in body["tokens"]]

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The server's chat template rendered as text (special tokens kept), so that prompts built
        with it tokenize back to exactly the template's tokens."""
        self.require("chat_template", "apply_chat_template")

        async def go() -> str:
            ids = await self._chat_ids(list(messages), add_generation_prompt)
            body = await self._post("/detokenize", {"model": self.model_id, "tokens": ids})
            return str(body["prompt"])

        return self.transport.run(go())

    async def _encode_prompts(self, prompts: Sequence[str], extra: int = 0) -> list[list[int]]:
        if isinstance(prompts, str):
            raise TypeError("prompts must be a sequence of strings, not one string")
        rows = [self._bos(r) for r in await self.transport.gather([self._plain_ids(p) for p in prompts])]
        for i, r in enumerate(rows):
            if not r:
                raise CapabilityError(f"prompt {i} is empty after tokenization; {self._label} needs at least one token")
            if self._max_context is not None and len(r) + extra > self._max_context:
                raise CapabilityError(
                    f"prompt {i} has {len(r)} tokens (+{extra}), more than the max context {self._max_context} "
                    f"of {self._label}"
                )
        return rows

    # --------------------------------------------------------------- scoring

    async def _next_lp_row(self, ids: list[int], salt: dict) -> np.ndarray:
        body = await self._post("/v1/completions", self._completion_body(ids, salt, logprobs=-1))
        choice = _first_choice(body, "a full-vocabulary logprobs request")
        try:
            top = choice["logprobs"]["top_logprobs"][0]
        except (KeyError, IndexError, TypeError):
            raise RemoteError(f"{self._label}: the server returned no top_logprobs") from None
        if not isinstance(top, dict):
            raise RemoteError(f"{self._label}: the server returned no top_logprobs")
        size = self._vocab_size or len(top)
        if len(top) < size:
            raise CapabilityError(
                f"{self._label} lacks the capability 'full_vocab_logprobs': it returned {len(top)} of {size} "
                f"log-probabilities; {_HINTS['full_vocab_logprobs']}"
            )
        row = np.full(size, -np.inf, dtype=np.float32)
        for key, lp in top.items():
            tid = _token_key_id(key)
            if 0 <= tid < size:
                row[tid] = -np.inf if lp <= _FLOOR else lp
        return row

    async def _next_lp_rows(self, rows: list[list[int]], salt: dict) -> np.ndarray:
        out = await self.transport.gather([self._next_lp_row(r, salt) for r in rows])
        if not out:
            return np.empty((0, self._vocab_size or 0), dtype=np.float32)
        return np.stack(out)

    def next_token_logprobs(self, prompts: Sequence[str]) -> np.ndarray:
        """(B, V) float32: log p(next token | prompt_b) over the full vocabulary (one request per prompt)."""
        self.require("full_vocab_logprobs", "next_token_logprobs")
        salt = self._salt(None)

        async def go():
            rows = await self._encode_prompts(prompts)
            return await self._next_lp_rows(rows, salt)

        return self.transport.run(go())

    async def _label_lp(self, ids: list[int], token_ids: Sequence[int], salt: dict) -> dict[int, float]:
        """log p(t | ids) for each t in token_ids (<= 128), via logprob_token_ids."""
        want = sorted({int(t) for t in token_ids})
        body = await self._post(
            "/v1/completions",
            self._completion_body(ids, salt, logprobs=len(want), logprob_token_ids=want),
        )
        choice = _first_choice(body, "a logprob_token_ids request")
        try:
            top = choice["logprobs"]["top_logprobs"][0]
        except (KeyError, IndexError, TypeError):
            raise RemoteError(f"{self._label}: the server returned no logprobs for logprob_token_ids") from None
        got = {_token_key_id(k): (-math.inf if v <= _FLOOR else float(v)) for k, v in (top or {}).items()}
        missing = [t for t in want if t not in got]
        if missing:
            raise ValueError(f"logprob_token_ids: the server left out token ids {missing[:5]}")
        return {t: got[t] for t in want}

    async def _prompt_token_logprobs(self, ids: list[int], start: int, salt: dict) -> list[float]:
        """log p(ids[j] | ids[:j]) for j >= start, via prompt_logprobs (teacher forced, one pass)."""
        body = await self._post("/v1/completions", self._completion_body(ids, salt, prompt_logprobs=0))
        choice = _first_choice(body, "a prompt_logprobs request")
        plp = choice.get("prompt_logprobs")
        if not isinstance(plp, list) or len(plp) != len(ids):
            raise ValueError(f"prompt_logprobs missing or of the wrong length ({type(plp).__name__})")
        out = []
        for j in range(start, len(ids)):
            entry = plp[j] or {}
            val = entry.get(str(ids[j]), entry.get(ids[j]))  # type: ignore[call-overload]
            if val is None:
                raise ValueError(f"prompt_logprobs has no entry for token {ids[j]} at position {j}")
            lp = float(val["logprob"] if isinstance(val, dict) else val)
            out.append(-math.inf if lp <= _FLOOR else lp)
        return out

    def continuation_logprobs(self, prompts: Sequence[str], continuations: Sequence[str]) -> np.ndarray:
        """(B, K) float64: ``sum_j log p(c_kj | prompt_b, c_k<j)``, exact (teacher forced on the server).

        One-token continuations: one ``logprob_token_ids`` request per prompt for all of them (or the
        full next-token distribution); longer ones: one ``prompt_logprobs`` request per pair, or,
        without prompt_logprobs, one request per distinct prefix of the continuation tree.
        """
        if isinstance(continuations, str):
            raise TypeError("continuations must be a sequence of strings, not one string")
        self.require("continuation_scoring", "continuation_logprobs")
        salt = self._salt(None)
        labels = self._has("logprob_token_ids")
        plp = self._has("prompt_logprobs")
        full = self._has("full_vocab_logprobs")

        async def go() -> np.ndarray:
            conts = await self.transport.gather([self._plain_ids(c) for c in continuations])
            longest = max((len(c) for c in conts), default=0)
            prows = await self._encode_prompts(prompts, extra=longest)
            out = np.zeros((len(prows), len(conts)), dtype=np.float64)
            if not prows or not conts or longest == 0:
                return out
            short = [k for k, c in enumerate(conts) if len(c) == 1]
            long_ = [k for k, c in enumerate(conts) if len(c) > 1]
            jobs: list[Awaitable[None]] = []

            async def by_prefix(b: int, ks: list[int]) -> None:
                # Teacher forcing through next-token requests: one request per distinct prefix.
                need: dict[tuple[int, ...], set[int]] = {}
                for k in ks:
                    for j, t in enumerate(conts[k]):
                        need.setdefault(tuple(conts[k][:j]), set()).add(t)
                scores: dict[tuple[int, ...], dict[int, float]] = {}

                async def one(prefix: tuple[int, ...]) -> None:
                    ids = prows[b] + list(prefix)
                    toks = sorted(need[prefix])
                    if labels:
                        parts = [toks[i:i + MAX_LOGPROB_TOKEN_IDS] for i in range(0, len(toks), MAX_LOGPROB_TOKEN_IDS)]
                        got: dict[int, float] = {}
                        for d in await self.transport.gather([self._label_lp(ids, p, salt) for p in parts]):
                            got.update(d)
                    else:
                        row = await self._next_lp_row(ids, salt)
                        got = {t: float(row[t]) for t in toks}
                    scores[prefix] = got

                await self.transport.gather([one(p) for p in need])
                for k in ks:
                    out[b, k] = sum(scores[tuple(conts[k][:j])][t] for j, t in enumerate(conts[k]))

            async def by_prompt_logprobs(b: int, k: int) -> None:
                ids = prows[b] + conts[k]
                out[b, k] = float(sum(await self._prompt_token_logprobs(ids, len(prows[b]), salt)))

            next_token = labels or full  # a next-token route exists
            # Multi-token continuations: one prompt_logprobs pass per pair where the server has it.
            via_plp = (long_ if plp else []) + ([] if next_token else short)
            via_prefix = [k for k in short + long_ if k not in via_plp]
            for b in range(len(prows)):
                jobs.extend(by_prompt_logprobs(b, k) for k in via_plp)
                if via_prefix:
                    jobs.append(by_prefix(b, via_prefix))
            await self.transport.gather(jobs)
            return out

        return self.transport.run(go())

    # ------------------------------------------------------------ generation

    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_p: float = 1.0,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[Generation]:
        """Greedy or sampled completions, one request per prompt (row ``i`` sampled with ``seed + i``)."""
        if max_new_tokens < 0:
            raise ValueError("max_new_tokens must be >= 0")
        if temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0.0 < top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1]")
        if isinstance(prompts, str):
            raise TypeError("prompts must be a sequence of strings, not one string")
        self.require("generation", "generate")
        tokenized = self._has("tokenize")  # without vLLM's /tokenize: text prompts, standard fields only
        if isinstance(stop, str):
            stop = [stop]
        stops = [s for s in (stop or []) if s]
        salt = self._salt(None)
        # Greedy or seeded requests give the same answer when resent; unseeded sampling is resent only
        # when it never reached the server.
        idempotent = temperature == 0.0 or seed is not None

        async def one(i: int, ids: list[int] | str) -> Generation:
            if max_new_tokens == 0:
                return Generation("", [], "length")
            room = (self._max_context - len(ids)) if (self._max_context and tokenized) else max_new_tokens
            if room < 1:
                return Generation("", [], "length")
            extra: dict[str, Any] = {
                "max_tokens": min(max_new_tokens, room),
                "temperature": float(temperature),
                "top_p": float(top_p),
            }
            if stops:
                extra["stop"] = stops
            if seed is not None:
                extra["seed"] = int(seed) + i
            if tokenized:
                req = self._completion_body(ids, salt, return_token_ids=True, skip_special_tokens=True, **extra)
            else:
                req = {"model": self.model_id, "prompt": ids, **salt, **extra}
            body = await self._post("/v1/completions", req, idempotent=idempotent)
            choice = _first_choice(body, "a generation request")
            tokens = [int(t) for t in (choice.get("token_ids") or [])]
            finish = "stop" if choice.get("finish_reason") == "stop" else "length"
            return Generation(str(choice.get("text") or ""), tokens, finish)

        async def go() -> list[Generation]:
            rows: Sequence[list[int] | str] = await self._encode_prompts(prompts) if tokenized else list(prompts)
            return await self.transport.gather([one(i, r) for i, r in enumerate(rows)])

        if not prompts:
            return []
        return self.transport.run(go())

    # -------------------------------------------------------------- decoding

    def start_decode(self, prompts: Sequence[str] | Sequence[Sequence[int]], *,
                     reuse_prefix: bool = True) -> RemoteDecodeSession:
        """A decode session over ``prompts`` (strings, or token id lists used as they are).
        ``reuse_prefix`` is accepted for the hf signature; nothing is cached on this side and the
        server's prefix cache is salted per call or tenant."""
        self.require("decode_session", "token-by-token decoding")
        if prompts and not isinstance(prompts[0], str):
            rows = [list(map(int, r)) for r in prompts]
            if any(len(r) == 0 for r in rows):
                raise CapabilityError("every token id prompt needs at least one token")
        else:
            rows = self.transport.run(self._encode_prompts(prompts))  # type: ignore[arg-type]
        if not rows:
            raise CapabilityError("start_decode needs at least one prompt")
        return RemoteDecodeSession(self, rows)

    def clear_prefix_cache(self) -> None:
        """Nothing is cached across calls on this side (the server's cache is salted per call or tenant)."""

    def close(self) -> None:
        self.transport.close()

    def __repr__(self) -> str:
        return f"RemoteLanguageModel(name={self.name!r}, server={self.opts.base_url!r}, model={self.model_id!r})"


class RemoteDecodeSession:
    """Same interface as :class:`app.llm.decode.DecodeSession`, over HTTP.

    ``logits`` are next-token log-probabilities (the raw logits shifted by a
    constant per row; see the module doc). Each step sends every live
    sequence again; one salt for the whole session lets the server reuse its
    prefix cache between steps.
    """

    def __init__(self, model: RemoteLanguageModel, rows: list[list[int]]):
        self._model = model
        self._tokens = [list(r) for r in rows]
        self._rows = list(range(len(rows)))
        self._salt = model._salt(None)
        self._open = True
        self._check_room()
        self._lp = self._fetch()

    def _check_room(self) -> None:
        limit = self._model._max_context
        if limit is not None and max(len(self._tokens[r]) for r in self._rows) > limit:
            raise CapabilityError(f"decoding past the max context {limit} of {self._model._label}")

    def _fetch(self) -> np.ndarray:
        rows = [self._tokens[r] for r in self._rows]
        return self._model.transport.run(self._model._next_lp_rows(rows, self._salt))

    @property
    def size(self) -> int:
        return len(self._rows)

    @property
    def rows(self) -> list[int]:
        return list(self._rows)

    @property
    def lengths(self) -> list[int]:
        return [len(self._tokens[r]) for r in self._rows]

    def token_ids(self, row: int) -> list[int]:
        return list(self._tokens[row])

    @property
    def logits(self) -> np.ndarray:
        """(s, V) float32 next-token log-probabilities (raw logits up to a per-row constant)."""
        return self._lp.copy()

    def logprobs(self) -> np.ndarray:
        return self._lp.copy()

    def step(self, tokens: int | Sequence[int]) -> np.ndarray:
        if not self._open:
            raise RuntimeError("decode session is closed")
        if isinstance(tokens, (int, np.integer)):
            tokens = [int(tokens)] * self.size
        tokens = [int(t) for t in tokens]
        if len(tokens) != self.size:
            raise ValueError(f"step needs {self.size} tokens (one per live sequence), got {len(tokens)}")
        vocab = self._lp.shape[1]
        for t in tokens:
            if not 0 <= t < vocab:
                raise ValueError(f"token id {t} outside the vocabulary [0, {vocab})")
        for r, t in zip(self._rows, tokens):
            self._tokens[r].append(t)
        self._check_room()
        self._lp = self._fetch()
        return self._lp.copy()

    def keep(self, live: Sequence[int]) -> None:
        if not self._open:
            raise RuntimeError("decode session is closed")
        live = list(live)
        self._lp = self._lp[live]
        self._rows = [self._rows[j] for j in live]

    def close(self) -> None:
        self._open = False

    def __enter__(self) -> RemoteDecodeSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -------------------------------------------------------------------- embedder


class RemoteEmbedder:
    """An embedding model behind an OpenAI-compatible ``/v1/embeddings`` (vLLM ``--task embed``)."""

    backend = "remote"

    def __init__(self, spec: ModelSpec, opts: RemoteOptions, transport: Transport | None = None):
        self.name = spec.name
        self.spec = spec
        self.opts = opts
        self.transport = transport or Transport(opts, label=f"embedder {spec.name!r}")
        self.model_id = opts.served_model_name or ""
        self._dim: int | None = None
        self._max_context = opts.max_context

    def _url(self, path: str) -> str:
        return self.opts.base_url + path[len("/v1"):]

    def connect(self) -> RemoteEmbedder:
        label = f"embedder {self.name!r} (remote backend, {self.opts.base_url})"
        try:
            listing = self.transport.run(self.transport.request("GET", self._url("/v1/models")))
        except RemoteError as exc:
            raise ModelLoadError(f"{label}: cannot list the server's models: {exc}") from None
        ids = [str(m.get("id")) for m in (listing.get("data") or []) if isinstance(m, dict)]
        if not self.model_id:
            if len(ids) != 1:
                raise ModelLoadError(f"{label}: the server serves {ids or 'no models'}; set options.served_model_name")
            self.model_id = ids[0]
        elif self.model_id not in ids:
            raise ModelLoadError(f"{label}: the server does not serve {self.model_id!r} (it serves {ids})")
        try:
            self._dim = int(self.transport.run(self._embed_chunk(["dimension probe"])).shape[1])
        except (RemoteError, ValueError) as exc:
            raise ModelLoadError(f"{label} lacks the capability 'embeddings': {exc}; {_HINTS['embeddings']}") from None
        return self

    def capabilities(self) -> Capabilities:
        return Capabilities(
            backend=self.backend, full_vocab_logprobs=False, continuation_scoring=False, generation=False,
            chat_template=False, embeddings=True, max_context=self._max_context, vocab_size=None,
            embedding_dim=self._dim, device="remote", dtype="server",
        )

    @property
    def dim(self) -> int:
        return int(self._dim or 0)

    async def _embed_chunk(self, texts: list[str]) -> np.ndarray:
        body = await self.transport.request(
            "POST", self._url("/v1/embeddings"), {"model": self.model_id, "input": texts, "encoding_format": "float"}
        )
        try:
            data = sorted(body["data"], key=lambda d: d["index"])
            emb = np.asarray([d["embedding"] for d in data], dtype=np.float64)
        except (KeyError, TypeError, ValueError):
            raise RemoteError(f"embedder {self.name!r}: unreadable /v1/embeddings answer: {str(body)[:200]}") from None
        if emb.ndim != 2 or emb.shape[0] != len(texts):
            raise RemoteError(f"embedder {self.name!r}: {emb.shape[0]} embeddings for {len(texts)} texts")
        return emb

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(N, D) float32, unit L2 norm; chunks of ``embed_batch_size`` texts, requests in parallel."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not one string")
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        n = self.opts.embed_batch_size
        chunks = [list(texts[i:i + n]) for i in range(0, len(texts), n)]

        async def go():
            return await self.transport.gather([self._embed_chunk(c) for c in chunks])

        emb = np.concatenate(self.transport.run(go()), axis=0)
        norms = np.linalg.norm(emb, axis=1, keepdims=True)
        return (emb / np.maximum(norms, 1e-12)).astype(np.float32)

    def close(self) -> None:
        self.transport.close()

    def __repr__(self) -> str:
        return f"RemoteEmbedder(name={self.name!r}, server={self.opts.base_url!r}, model={self.model_id!r})"


# ---------------------------------------------------------------------- loading


def load_remote(spec: ModelSpec) -> RemoteLanguageModel | RemoteEmbedder:
    """Connect to the server named by ``spec`` and negotiate capabilities. Raises ModelLoadError."""
    opts = RemoteOptions.from_spec(spec)
    if spec.kind == "embedder":
        emb = RemoteEmbedder(spec, opts)
        try:
            return emb.connect()
        except BaseException:
            emb.close()
            raise
    lm = RemoteLanguageModel(spec, opts)
    try:
        lm.connect()
    except BaseException:
        lm.close()
        raise
    caps = lm.capabilities()
    log.info("%s: connected to %r; capabilities %s", spec.name, lm.model_id,
             json.dumps({k: v for k, v in asdict(caps).items() if isinstance(v, bool)}, sort_keys=True))
    return lm


__all__ = [
    "RemoteCapabilities",
    "RemoteDecodeSession",
    "RemoteEmbedder",
    "RemoteError",
    "RemoteLanguageModel",
    "RemoteOptions",
    "RemoteTimeout",
    "Transport",
    "cache_salt_scope",
    "load_remote",
]
