"""Token-by-token private decoding over s prompts, on top of ``app.llm``'s decode session.

Each step: the model gives the (s, V) next-token logits of the s prompts (each
extended by the tokens released so far), a private rule chooses ONE token from
them, and that token is appended to all s sequences. With the KV cache
(:class:`app.llm.decode.DecodeSession`) a step is one forward pass of s
sequences of one token; :class:`ReencodeSession` recomputes every sequence from
scratch each step (the reference the tests and the benchmark compare against).

Stopping at EOS or a stop string is post-processing of released tokens; the
privacy cost is charged for ``max_tokens`` steps whatever the stop.

Public candidate sets (``public_prompt``): one more sequence, the zero-shot prompt
(template + query, no exemplar), decoded in a session of its own that receives the
same released tokens; ``choose(private_logits, public_logits)`` then gets the s
private rows and that public row, and :func:`public_candidates` turns the public row
alone into the step's candidate set (top-k, EOS added). The set is a function of the
query, the template and the tokens already released: public data. (Its own session,
not one more row of the private batch: batched with the private rows, its float32
logits would move with their padding, up to 4e-5 measured, so a near-tie at the
top-k cut could depend on the private prompts' lengths; and a fresh one, not reading
the cross-call prefix cache that private prompts fill.)
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import numpy.typing as npt

from app.mechanisms.errors import MechanismParamError
from app.mechanisms.lm import DecodingModel, StepSession, supports_decoding

if TYPE_CHECKING:
    from app.llm.types import LanguageModel


class ReencodeSession:
    """Same interface as the KV-cached session, but every step re-encodes each full sequence
    (prompt + released tokens) with a fresh ``start_decode``: no KV reuse across steps."""

    def __init__(self, lm: DecodingModel, prompts: Sequence[str]) -> None:
        self._lm = lm
        self._rows = [list(lm.tokenize(p)) for p in prompts]
        self._logits = self._encode()

    def _encode(self) -> np.ndarray:
        # No keys/values survive from one step to the next: drop the model's cross-call prefix
        # cache (within one call the batch's common prefix is still computed once).
        clear = getattr(self._lm, "clear_prefix_cache", None)
        if clear is not None:
            clear()
        s = self._lm.start_decode(self._rows)
        try:
            return s.logits
        finally:
            s.close()

    @property
    def logits(self) -> np.ndarray:
        return self._logits

    def step(self, tokens: int) -> np.ndarray:
        for r in self._rows:
            r.append(int(tokens))
        self._logits = self._encode()
        return self._logits

    def close(self) -> None:
        self._rows = []


def decoding_model(lm: LanguageModel) -> DecodingModel:
    """``lm`` itself, as a model with incremental decoding; raises naming ``model`` when it has none."""
    if not supports_decoding(lm):
        raise MechanismParamError(
            f"model {getattr(lm, 'name', '?')!r} has no incremental decoding (full-vocabulary logits per step); "
            "token-level mechanisms need the hf backend",
            param="model",
        )
    return lm


def open_session(
    lm: LanguageModel, prompts: Sequence[str], *, reencode: bool = False, fresh: bool = False
) -> StepSession:
    """``fresh``: the backend's cross-call prefix cache is neither read nor filled (where the backend
    offers it), so the logits depend on these prompts alone."""
    dm = decoding_model(lm)
    if reencode:
        return ReencodeSession(dm, prompts)
    if fresh and "reuse_prefix" in inspect.signature(dm.start_decode).parameters:
        return dm.start_decode(list(prompts), reuse_prefix=False)
    return dm.start_decode(list(prompts))


@dataclass
class DecodeOutcome:
    token_ids: list[int]
    text: str
    finish_reason: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    seconds_per_step: list[float] = field(default_factory=list)
    prefill_seconds: float = 0.0


ChooseFn = Callable[..., "tuple[int, dict[str, Any]]"]


def eos_ids(lm: object) -> frozenset[int]:
    return frozenset(int(t) for t in getattr(lm, "eos_token_ids", ()) or ())


def public_candidates(public_logits: npt.ArrayLike, k: int, always: Sequence[int] = ()) -> npt.NDArray[np.int64]:
    """The k highest-scoring token ids of the PUBLIC row (ties to the lower id), plus ``always``
    (EOS, so an answer can end), sorted ascending. Reads nothing but its arguments: a caller
    passes the zero-shot row only, never a row built from exemplars."""
    z = np.asarray(public_logits, dtype=np.float64).reshape(-1)
    k = min(int(k), z.size)
    top = np.argsort(-z, kind="stable")[:k]
    extra = [int(t) for t in always if 0 <= int(t) < z.size]
    return np.unique(np.concatenate([top.astype(np.int64), np.asarray(extra, dtype=np.int64)]))


def restrict(scores: np.ndarray, candidates: npt.NDArray[np.integer[Any]] | None) -> np.ndarray:
    """``scores`` with every token outside ``candidates`` set to -inf (no mass there after
    softmax / Gumbel-max); ``candidates`` None leaves the full vocabulary."""
    if candidates is None:
        return scores
    out = np.full_like(np.asarray(scores, dtype=np.float64), -np.inf)
    out[candidates] = scores[candidates]
    return out


def decode(
    lm: LanguageModel,
    prompts: Sequence[str],
    choose: ChooseFn,
    max_tokens: int,
    *,
    stops: Sequence[str] | None = None,
    reencode: bool = False,
    stop_at_eos: bool = True,
    public_prompt: str | None = None,
    private_steps: int | None = None,
) -> DecodeOutcome:
    """Run ``max_tokens`` private steps at most; ``choose(logits)`` returns (token, step internals).

    With ``public_prompt``, that prompt is decoded in a session of its own (it receives the
    same released tokens) and ``choose(logits, public_logits)`` is called with the s private
    rows and the public row.

    ``private_steps`` (needs ``public_prompt``): after that many steps the private session is
    closed and the answer goes on greedily from the public row alone (the zero-shot baseline's
    decoding, conditioned on the released tokens). Those steps read no exemplar: a function of
    the query and of tokens already released, 0-DP (post-processing), so a charge for
    ``private_steps`` compositions covers the whole answer."""
    if private_steps is not None and public_prompt is None:
        raise ValueError("private_steps needs a public_prompt to continue from")
    n_private = max_tokens if private_steps is None else private_steps
    dm = decoding_model(lm)  # raises before any model call when ``lm`` cannot decode step by step
    eos = eos_ids(lm) if stop_at_eos else frozenset()
    t0 = time.perf_counter()
    sess = open_session(lm, list(prompts), reencode=reencode)
    pub = None
    try:
        pub = None if public_prompt is None else open_session(lm, [public_prompt], reencode=reencode, fresh=True)
    except BaseException:
        sess.close()
        raise
    prefill = time.perf_counter() - t0
    out: list[int] = []
    steps: list[dict[str, Any]] = []
    timings: list[float] = []
    finish = "length"
    text_cut: str | None = None
    try:
        logits = sess.logits
        pub_logits = None if pub is None else pub.logits
        for i in range(max_tokens):
            info: dict[str, Any]
            if i < n_private:
                tok, info = choose(logits) if pub_logits is None else choose(logits, pub_logits[0])
            else:
                assert pub_logits is not None
                tok = int(np.argmax(np.asarray(pub_logits[0]).reshape(-1)))
                info = {"token": tok, "public": True}
            steps.append(info)
            if tok in eos:
                finish = "stop"
                break
            out.append(int(tok))
            if stops:
                text = dm.detokenize(out)
                cut = min((j for j in (text.find(s) for s in stops) if j >= 0), default=-1)
                if cut >= 0:
                    finish, text_cut = "stop", text[:cut]
                    break
            if i == max_tokens - 1:
                break
            ts = time.perf_counter()
            if i + 1 < n_private:
                logits = sess.step(int(tok))
            elif i + 1 == n_private:
                sess.close()  # no exemplar is read from here on
            if pub is not None:
                pub_logits = pub.step(int(tok))
            timings.append(time.perf_counter() - ts)
    finally:
        sess.close()
        if pub is not None:
            pub.close()
    text = text_cut if text_cut is not None else dm.detokenize(out)
    return DecodeOutcome(out, text, finish, steps, timings, prefill)
