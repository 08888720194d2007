"""What a remote server can do, found when a RemoteLanguageModel connects (``RemoteLanguageModel.connect``).

The served model is found in ``/v1/models`` (waiting up to ``startup_timeout`` for the server), then each
capability is probed with one small request, or taken as declared (``options.declared``; ``discover``
off). A probe that fails for the server's lack of the feature records why (``capabilities().missing``);
a refused key, a rate limit or a 5xx stops the load with a ModelLoadError instead, as does a declared
capability the server lacks, or a server that rejects ``cache_salt`` (without it the prefix cache is a
cross-tenant side channel).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from ..errors import ModelLoadError
from .transport import _CAPABILITY_NAMES, RemoteError, first_choice

if TYPE_CHECKING:
    from .lm import RemoteLanguageModel

log = logging.getLogger("app.llm.remote.lm")


async def wait_models(lm: RemoteLanguageModel) -> dict[str, Any]:
    deadline = time.monotonic() + lm.opts.startup_timeout
    while True:
        try:
            return await lm.transport.request("GET", lm._url("/v1/models"))
        except RemoteError as exc:
            if exc.status in (401, 403) or time.monotonic() >= deadline:
                raise
            log.info("%s: waiting for the server (%s)", lm._label, exc)
            await asyncio.sleep(min(2.0, max(0.1, deadline - time.monotonic())))


async def connect(lm: RemoteLanguageModel) -> None:
    try:
        listing = await wait_models(lm)
    except RemoteError as exc:
        raise ModelLoadError(f"{lm._label}: cannot list the server's models: {exc}") from None
    entries = [m for m in (listing.get("data") or []) if isinstance(m, dict)] if isinstance(listing, dict) else []
    ids = [str(m.get("id")) for m in entries]
    if not lm.model_id:
        if len(ids) != 1:
            raise ModelLoadError(
                f"{lm._label}: the server serves {ids or 'no models'}; set options.served_model_name"
            )
        lm.model_id = ids[0]
    elif lm.model_id not in ids:
        raise ModelLoadError(
            f"{lm._label}: the server does not serve {lm.model_id!r} (it serves {ids}); "
            f"check options.served_model_name"
        )
    entry = entries[ids.index(lm.model_id)]
    if lm._max_context is None and isinstance(entry.get("max_model_len"), int):
        lm._max_context = int(entry["max_model_len"])

    declared = lm.opts.declared
    if not lm.opts.discover:
        for name in _CAPABILITY_NAMES:
            default = name in ("generation",)
            lm._have[name] = bool(declared.get(name, default))
            if not lm._have[name]:
                lm._missing[name] = "declared false" if name in declared else "not declared (discover is off)"
        if lm._have.get("tokenize"):
            await probe_bos(lm)
        return

    probes: dict[str, Callable[[], Awaitable[None]]] = {
        "tokenize": partial(probe_tokenize, lm),
        "chat_template": partial(probe_chat, lm),
        "generation": partial(probe_generation, lm),
        "full_vocab_logprobs": partial(probe_full_vocab, lm),
        "prompt_logprobs": partial(probe_prompt_logprobs, lm),
        "logprob_token_ids": partial(probe_label_ids, lm),
    }
    for name, probe in probes.items():
        if declared.get(name) is False:
            lm._have[name], lm._missing[name] = False, "declared false"
            continue
        if name != "tokenize" and name != "generation" and not lm._have.get("tokenize"):
            lm._have[name], lm._missing[name] = False, "needs tokenize"
            continue
        try:
            await probe()
            lm._have[name] = True
        except (RemoteError, ValueError, KeyError, TypeError, IndexError) as exc:
            if isinstance(exc, RemoteError) and (exc.status is None or exc.status in (401, 403, 429)
                                                 or exc.status >= 500):
                raise ModelLoadError(f"{lm._label}: capability probe {name!r} failed: {exc}") from None
            if "cache_salt" in str(exc) and not lm.opts.salt_off:
                raise ModelLoadError(
                    f"{lm._label}: the server rejects cache_salt ({exc}); without it the prefix cache is a "
                    "cross-tenant side channel. Use a vLLM with cache_salt, or set options.cache_salt to "
                    "\"off\" for a server without prefix caching"
                ) from None
            lm._have[name], lm._missing[name] = False, str(exc)[:300]
        if declared.get(name) and not lm._have[name]:
            raise ModelLoadError(
                f"{lm._label}: capability {name!r} is declared but the server lacks it: {lm._missing[name]}"
            )
    lm._have["embeddings"] = False
    lm._missing["embeddings"] = "a language model (kind 'lm')"


async def probe_bos(lm: RemoteLanguageModel) -> None:
    plain = await lm._tokenize_remote("x", False)
    special = await lm._tokenize_remote("x", True)
    if len(special) > len(plain) and special[1:1 + len(plain)] == plain and special[0] not in plain[:1]:
        lm._bos_id = int(special[0])


async def probe_tokenize(lm: RemoteLanguageModel) -> None:
    await probe_bos(lm)
    ids = await lm._plain_ids("Hello world")
    body = await lm._post("/detokenize", {"model": lm.model_id, "tokens": ids})
    if body.get("prompt") != "Hello world":
        raise ValueError(f"/detokenize does not invert /tokenize ({body.get('prompt')!r})")
    if not lm.eos_token_ids:
        lm.eos_token_ids = await discover_eos(lm)


async def discover_eos(lm: RemoteLanguageModel) -> frozenset[int]:
    # vLLM's optional /tokenizer_info (--enable-tokenizer-info-endpoint) names the EOS token.
    with contextlib.suppress(RemoteError, ValueError, KeyError, TypeError):
        info = await lm.transport.request("GET", lm._url("/tokenizer_info"))
        eos = info.get("eos_token")
        if isinstance(eos, dict):
            eos = eos.get("content")
        if isinstance(eos, str) and eos:
            ids = await lm._tokenize_remote(eos, False)
            if len(ids) == 1:
                return frozenset(ids)
    return frozenset()


async def probe_chat(lm: RemoteLanguageModel) -> None:
    await lm._chat_ids([{"role": "user", "content": "hi"}], True)


async def probe_generation(lm: RemoteLanguageModel) -> None:
    if lm._have.get("tokenize"):
        ids = lm._bos(await lm._plain_ids("Hello"))
        body = lm._completion_body(ids, lm._salt(None), max_tokens=1, return_token_ids=True)
    else:  # standard OpenAI fields only
        body = {"model": lm.model_id, "prompt": "Hello", "max_tokens": 1, **lm._salt(None)}
    first_choice(await lm._post("/v1/completions", body), "a generation probe")


async def probe_full_vocab(lm: RemoteLanguageModel) -> None:
    ids = await lm._plain_ids("Hello")
    row = await lm._next_lp_row(lm._bos(ids), lm._salt(None))
    if lm._vocab_size is None:
        lm._vocab_size = int(row.shape[0])


async def probe_prompt_logprobs(lm: RemoteLanguageModel) -> None:
    ids = lm._bos(await lm._plain_ids("Hello world"))
    lps = await lm._prompt_token_logprobs(ids + ids, len(ids), lm._salt(None))
    if len(lps) != len(ids) or not all(math.isfinite(x) for x in lps):
        raise ValueError("prompt_logprobs did not score the prompt's tokens")


async def probe_label_ids(lm: RemoteLanguageModel) -> None:
    ids = lm._bos(await lm._plain_ids("Hello"))
    want = ids[-1:]
    got = await lm._label_lp(ids, want, lm._salt(None))
    if set(got) != set(want):
        raise ValueError("logprob_token_ids did not return the requested ids")
