"""Private generation: ``POST /v1/private/generate`` and the OpenAI-compatible route for generation
sets. What is particular to generation (embedder, step-by-step decoding, the released body); the
rest is the one private path (app/answers/private.py, flow.py).

Exemplar text never appears in a response, error or log: internals hold exemplar indices and
numbers, and the candidates of ESA are zero-shot. ``full_context`` (every exemplar in the prompt, no
guarantee) is served only when ``DPICL_ALLOW_NONPRIVATE_BASELINES`` is set; ``zero_shot`` reads no
exemplar and is never charged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.orm import Session

from app.answers.errors import InvalidRequest, NotFound
from app.answers.flow import Caller, PrivateAnswer, Work, answer, mechanism_error, require_scope
from app.answers.private import Ask, nonprivate_refused, private_work
from app.mechanisms.protocol import Generation, MechanismOutput
from app.runtime import Runtime

MAX_TOKENS_LIMIT = 512


async def generate(
    rt: Runtime,
    caller: Caller,
    *,
    dataset_id: str,
    query: str,
    mechanism: str,
    params: dict[str, Any],
    model: str | None,
    max_tokens: int | None,
    return_internals: bool,
    seed: int | None,
    idempotency_key: str | None,
    embedder: str | None = None,
    reuse: bool = True,
    client_gone: Callable[[], Awaitable[bool]] | None = None,
) -> PrivateAnswer:
    """One private generation, charged before release. ``params`` may carry ``epsilon``, ``delta``
    and ``adjacency`` beside the mechanism's own parameters (the OpenAI-compatible route passes
    them so)."""
    from app.mechanisms.errors import MechanismParamError
    from app.mechanisms.protocol import mechanism_for

    require_scope(caller, return_internals)
    try:
        mech = mechanism_for("generation", mechanism)
    except MechanismParamError as exc:
        raise mechanism_error(exc) from None
    assert isinstance(mech, Generation)
    if not mech.is_private and mech.reads_exemplars and not rt.settings.allow_nonprivate_baselines:
        raise nonprivate_refused(mech.name)
    try:
        lm = rt.get_model(model, "lm")
    except KeyError:
        raise NotFound(f"model {model!r} is not served here", param="model", code="model_not_found") from None
    emb = None
    if mech.mech.needs_embedder:
        try:
            emb = rt.get_model(embedder, "embedder")
        except KeyError:
            raise NotFound(f"embedder {embedder!r} is not served here", param="embedder",
                           code="model_not_found") from None
    if mech.mech.needs_decode_session and not hasattr(lm, "start_decode"):
        raise InvalidRequest(f"mechanism {mech.name!r} needs full-vocabulary logits step by step; model "
                             f"{lm.name!r} cannot give them", param="model", code="capability_missing")
    ask = Ask(dataset_id, query, {**params, "max_tokens": max_tokens}, return_internals, seed, idempotency_key,
              reuse)

    def body(out: MechanismOutput) -> dict[str, Any]:
        return {
            "object": "private.generation",
            "dataset_id": dataset_id,
            "model": lm.name,
            "text": out.release,
            "mechanism": out.details["mechanism"],
            "finish_reason": out.details["finish_reason"],
            "usage": {"completion_tokens": out.details["tokens"]},
            "privacy": out.privacy,
            "internals": out.internals,  # stored with the charge for white-box audits; stripped unless asked
        }

    def prepare(s: Session) -> Work:
        return private_work(rt, s, caller, mech, ask, lm=lm, embedder=emb, body=body)

    return await answer(rt, caller, prepare, seed=seed, client_gone=client_gone)
