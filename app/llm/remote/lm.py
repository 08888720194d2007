"""Remote backend: :class:`RemoteLanguageModel`, the LanguageModel protocol over an OpenAI-compatible server."""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import secrets
from collections.abc import Awaitable, Sequence
from dataclasses import asdict
from typing import Any, Literal, cast

import numpy as np

from app.lru import LRU

from ..errors import CapabilityError
from ..tenancy import _TENANT, spend_work
from ..types import Generation, ModelSpec, check_generation_args, check_prompt_rows, stop_strings
from .capabilities import _HINTS, RemoteCapabilities
from .decode import RemoteDecodeSession
from . import discovery
from .transport import (
    _FLOOR,
    MAX_LOGPROB_TOKEN_IDS,
    RemoteError,
    RemoteOptions,
    Transport,
    first_choice,
)

log = logging.getLogger(__name__)


# --------------------------------------------------------------------- helpers


def _token_key_id(key: str) -> int:
    # return_tokens_as_token_ids: keys are "token_id:123"
    try:
        return int(key.rsplit(":", 1)[1]) if key.startswith("token_id:") else int(key)
    except (ValueError, IndexError):
        raise RemoteError(f"cannot read a token id from the server's logprobs key {key!r}") from None


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
        self._tok_cache = LRU(4096)
        self._bos_id: int | None = None
        self.eos_token_ids: frozenset[int] = frozenset(opts.eos_token_ids or ())
        self._max_context = opts.max_context
        # What one answer's default token budget is derived from (app.answers.flow.answer_token_budget: twice
        # this), as the hf backend's max_batch_tokens: vLLM's --max-num-batched-tokens, declared (default 8192).
        self.max_batch_tokens = opts.max_batch_tokens
        self._vocab_size = opts.vocab_size
        self._have: dict[str, bool] = {}
        self._missing: dict[str, str] = {}
        self._caps: RemoteCapabilities | None = None

    # ---------------------------------------------------------------- set-up

    @property
    def _label(self) -> str:
        return f"model {self.name!r} (remote backend, {self.opts.public_url})"

    def _url(self, path: str) -> str:
        if path.startswith("/v1/"):
            return self.opts.base_url + path[len("/v1"):]
        return self.opts.root_url + path

    def _post(self, path: str, body: dict[str, Any], *, idempotent: bool = True) -> Any:
        return self.transport.request("POST", self._url(path), body, idempotent=idempotent)

    def connect(self) -> RemoteLanguageModel:
        """Find the served model, then probe (or take as declared) what the server can do."""
        self.transport.run(discovery.connect(self))
        return self



    async def _tokenize_remote(self, text: str, add_special_tokens: bool) -> list[int]:
        body = await self._post("/tokenize", {"model": self.model_id, "prompt": text,
                                              "add_special_tokens": add_special_tokens})
        return [int(t) for t in body["tokens"]]





    def _salt(self, call_salt: str | None) -> dict[str, Any]:
        if self.opts.salt_off:
            return {}
        tenant = _TENANT.get()
        if tenant is not None:
            return {"cache_salt": hmac.new(self._salt_key, tenant.encode(), hashlib.sha256).hexdigest()}
        return {"cache_salt": call_salt or secrets.token_hex(32)}

    def _completion_body(self, prompt_ids: list[int], salt: dict[str, Any], **extra: Any) -> dict[str, Any]:
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
            server=self.opts.public_url,
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

    async def _chat_ids(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> list[int]:
        body = await self._post("/tokenize", {"model": self.model_id, "messages": messages,
                                              "add_generation_prompt": add_generation_prompt,
                                              "add_special_tokens": False})
        return [int(t) for t in body["tokens"]]

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
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
        return check_prompt_rows(rows, extra, self._max_context, self._label)

    # An answer's token budget (tenancy.work_scope) counts what each request submits, before any completion
    # request is sent: the prompt's tokens, tokenized by the server's /tokenize first (cheap next to a
    # completion), or its characters where the server has no /tokenize; a generation's max_tokens per row; one
    # token per live row per decode step (the server's prefix cache holds the rest, as the hf KV cache does).
    # spend_work runs inside the coroutines: run_coroutine_threadsafe carries the caller's context (its scope).

    # --------------------------------------------------------------- scoring

    async def _next_lp_row(self, ids: list[int], salt: dict[str, Any]) -> np.ndarray:
        body = await self._post("/v1/completions", self._completion_body(ids, salt, logprobs=-1))
        choice = first_choice(body, "a full-vocabulary logprobs request")
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

    async def _next_lp_rows(self, rows: list[list[int]], salt: dict[str, Any]) -> np.ndarray:
        out = await self.transport.gather([self._next_lp_row(r, salt) for r in rows])
        if not out:
            return np.empty((0, self._vocab_size or 0), dtype=np.float32)
        return np.stack(out)

    def next_token_logprobs(self, prompts: Sequence[str]) -> np.ndarray:
        """(B, V) float32: log p(next token | prompt_b) over the full vocabulary (one request per prompt)."""
        self.require("full_vocab_logprobs", "next_token_logprobs")
        salt = self._salt(None)

        async def go() -> np.ndarray:
            rows = await self._encode_prompts(prompts)
            spend_work(sum(len(r) for r in rows), f"{len(rows)} prompt rows")
            return await self._next_lp_rows(rows, salt)

        return self.transport.run(go())

    async def _label_lp(self, ids: list[int], token_ids: Sequence[int], salt: dict[str, Any]) -> dict[int, float]:
        """log p(t | ids) for each t in token_ids (<= 128), via logprob_token_ids."""
        want = sorted({int(t) for t in token_ids})
        body = await self._post(
            "/v1/completions",
            self._completion_body(ids, salt, logprobs=len(want), logprob_token_ids=want),
        )
        choice = first_choice(body, "a logprob_token_ids request")
        try:
            top = choice["logprobs"]["top_logprobs"][0]
        except (KeyError, IndexError, TypeError):
            raise RemoteError(f"{self._label}: the server returned no logprobs for logprob_token_ids") from None
        got = {_token_key_id(k): (-math.inf if v <= _FLOOR else float(v)) for k, v in (top or {}).items()}
        missing = [t for t in want if t not in got]
        if missing:
            raise ValueError(f"logprob_token_ids: the server left out token ids {missing[:5]}")
        return {t: got[t] for t in want}

    async def _prompt_token_logprobs(self, ids: list[int], start: int, salt: dict[str, Any]) -> list[float]:
        """log p(ids[j] | ids[:j]) for j >= start, via prompt_logprobs (teacher forced, one pass)."""
        body = await self._post("/v1/completions", self._completion_body(ids, salt, prompt_logprobs=0))
        choice = first_choice(body, "a prompt_logprobs request")
        plp = choice.get("prompt_logprobs")
        if not isinstance(plp, list) or len(plp) != len(ids):
            raise ValueError(f"prompt_logprobs missing or of the wrong length ({type(plp).__name__})")
        out = []
        for j in range(start, len(ids)):
            entry = plp[j] or {}
            val = entry.get(str(ids[j]), entry.get(ids[j]))
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
            next_token = labels or full  # a next-token route exists
            # Multi-token continuations: one prompt_logprobs pass per pair where the server has it.
            via_plp = (long_ if plp else []) + ([] if next_token else short)
            via_prefix = [k for k in short + long_ if k not in via_plp]
            # Teacher forcing through next-token requests: one request per distinct prefix (of every prompt).
            need: dict[tuple[int, ...], set[int]] = {}
            for k in via_prefix:
                for j, t in enumerate(conts[k]):
                    need.setdefault(tuple(conts[k][:j]), set()).add(t)
            per_prefix = {p: -(-len(ts) // MAX_LOGPROB_TOKEN_IDS) if labels else 1 for p, ts in need.items()}
            spend_work(sum(len(r) + len(conts[k]) for r in prows for k in via_plp)
                       + sum((len(r) + len(p)) * n for r in prows for p, n in per_prefix.items()),
                       f"scoring {len(prows)} prompts x {len(conts)} continuations")

            async def by_prefix(b: int, ks: list[int]) -> None:
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
        check_generation_args(max_new_tokens, temperature, top_p)
        if isinstance(prompts, str):
            raise TypeError("prompts must be a sequence of strings, not one string")
        self.require("generation", "generate")
        tokenized = self._has("tokenize")  # without vLLM's /tokenize: text prompts, standard fields only
        stops = stop_strings(stop)
        salt = self._salt(None)
        # Greedy or seeded requests give the same answer when resent; unseeded sampling is resent only
        # when it never reached the server.
        idempotent = temperature == 0.0 or seed is not None

        async def one(i: int, ids: list[int] | str) -> Generation:
            n = room(ids)
            if n < 1:
                return Generation("", [], "length")
            extra: dict[str, Any] = {
                "max_tokens": n,
                "temperature": float(temperature),
                "top_p": float(top_p),
            }
            if stops:
                extra["stop"] = stops
            if seed is not None:
                extra["seed"] = int(seed) + i
            if tokenized:
                req = self._completion_body(cast(list[int], ids), salt, return_token_ids=True, skip_special_tokens=True, **extra)
            else:
                req = {"model": self.model_id, "prompt": ids, **salt, **extra}
            body = await self._post("/v1/completions", req, idempotent=idempotent)
            choice = first_choice(body, "a generation request")
            tokens = [int(t) for t in (choice.get("token_ids") or [])]
            finish: Literal["stop", "length"] = "stop" if choice.get("finish_reason") == "stop" else "length"
            return Generation(str(choice.get("text") or ""), tokens, finish)

        def room(ids: list[int] | str) -> int:
            left = (self._max_context - len(ids)) if (self._max_context and tokenized) else max_new_tokens
            return 0 if max_new_tokens == 0 or left < 1 else min(max_new_tokens, left)

        async def go() -> list[Generation]:
            rows: Sequence[list[int] | str]
            if tokenized:
                rows = await self._encode_prompts(prompts)
            else:
                rows = list(prompts)  # no /tokenize: a prompt's characters stand for its tokens
            spend_work(sum(len(r) + room(r) for r in rows if room(r)), f"generating for {len(rows)} prompts")
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
        spend_work(sum(len(r) for r in rows), f"decoding {len(rows)} prompts")
        return RemoteDecodeSession(self, rows)

    def clear_prefix_cache(self) -> None:
        """Nothing is cached across calls on this side (the server's cache is salted per call or tenant)."""

    def close(self) -> None:
        self.transport.close()

    def __repr__(self) -> str:
        return f"RemoteLanguageModel(name={self.name!r}, server={self.opts.public_url!r}, model={self.model_id!r})"
