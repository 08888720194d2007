"""Private classification: ``POST /v1/private/classify`` and the OpenAI-compatible route for
classification sets. What is particular to classification (labels, public synthetic sets, the
released body); the rest is the one private path (app/answers/private.py, flow.py)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.answers.errors import InvalidRequest, NotFound
from app.answers.flow import AnswerPlan, Caller, PrivateAnswer, Released, Work, answer, mechanism_error, require_scope
from app.answers.private import Ask, private_work, run_mechanism
from app.mechanisms.protocol import AnswerInputs, Classification, MechanismOutput
from app.runtime import Runtime

PUBLIC_MECHANISMS = ("synthetic_icl", "icl", "zero_shot")
_PRIVACY_FIELDS = ("epsilon", "delta", "partitions", "shots_per_partition", "adjacency")


async def classify(
    rt: Runtime,
    caller: Caller,
    *,
    dataset_id: str,
    query: str,
    mechanism: str,
    params: dict[str, Any],
    model: str | None,
    return_internals: bool,
    seed: int | None,
    idempotency_key: str | None,
    reuse: bool = True,
    client_gone: Callable[[], Awaitable[bool]] | None = None,
) -> PrivateAnswer:
    from app.mechanisms.errors import MechanismParamError
    from app.mechanisms.protocol import mechanism_for

    require_scope(caller, return_internals)
    try:
        mech = mechanism_for("classification", mechanism)
    except MechanismParamError as exc:
        raise mechanism_error(exc) from None
    assert isinstance(mech, Classification)
    try:
        lm = rt.get_model(model, "lm")
    except KeyError:
        raise NotFound(f"model {model!r} is not served here", param="model", code="model_not_found") from None
    ask = Ask(dataset_id, query, params, return_internals, seed, idempotency_key, reuse)

    def body(out: MechanismOutput) -> dict[str, Any]:
        return {
            "object": "private.classification",
            "dataset_id": dataset_id,
            "model": lm.name,
            "label": out.release,
            "mechanism": out.details["mechanism"],
            "privacy": out.privacy,
            "internals": out.internals,  # stored for white-box audits; stripped unless asked
        }

    def public(ds: Any, exemplars: list[Any], template: dict[str, Any]) -> Work:
        return _public_work(mech, lm, ds, dataset_id, query, template, exemplars, params, return_internals)

    def prepare(s: Session) -> Work:
        return private_work(rt, s, caller, mech, ask, lm=lm, body=body, public=public)

    return await answer(rt, caller, prepare, seed=seed, client_gone=client_gone)


def _public_work(mech: Classification, lm: Any, ds: Any, dataset_id: str, query: str, template: dict[str, Any],
                 exemplars: list[Any], params: dict[str, Any], return_internals: bool) -> Work:
    """A public (DP synthetic) set: ICL over its demonstrations is post-processing, charged nothing
    (the synthesize job paid once on the parent's ledger). ``synthetic_icl`` is refused on a private
    set: it would read private exemplars at a claimed epsilon of 0."""
    from app.mechanisms.baselines import synthetic_cost
    from app.mechanisms.errors import MechanismParamError

    if (ds.visibility or "private") != "public":
        raise InvalidRequest(f"synthetic_icl answers from a public synthetic set; dataset {dataset_id!r} is private "
                             "(make one with the synthesize job)", param="dataset_id", code="dataset_not_public")
    if mech.name not in PUBLIC_MECHANISMS:
        raise InvalidRequest(f"dataset {dataset_id!r} is a public synthetic set: use one of "
                             f"{', '.join(PUBLIC_MECHANISMS)} (no privacy mechanism is needed)", param="mechanism",
                             code="public_dataset")
    params = {k: v for k, v in params.items() if v is not None}
    given = next((k for k in _PRIVACY_FIELDS if k in params), None)
    if given is not None:
        raise InvalidRequest(f"mechanism {mech.name!r} on a public set takes no privacy parameters",
                             param=given, code="not_private")
    try:
        parsed = mech.parse_params(params)
    except (MechanismParamError, ValueError) as exc:
        raise mechanism_error(exc) from None
    p = dict(ds.provenance or {})
    plan = AnswerPlan(dataset_id, mech.name, None, False, {}, None, False, None, return_internals, None,
                      budgeted=False)
    inputs = AnswerInputs(lm, exemplars, query, tuple(ds.labels or ()), template)

    def compute(rng: np.random.Generator | None) -> Released:
        t0 = time.perf_counter()
        out = run_mechanism(mech, parsed, inputs, None)
        privacy = synthetic_cost(parsed.to_dict()) if mech.name != "zero_shot" else out.privacy
        privacy["mechanism"] = mech.name
        return Released({
            "object": "private.classification",
            "dataset_id": dataset_id,
            "model": lm.name,
            "label": out.release,
            "mechanism": out.details["mechanism"],
            "privacy": privacy,
            "synthetic_source": {k: p.get(k) for k in ("parent_dataset_id", "epsilon", "delta", "adjacency",
                                                       "mechanism")},
            "internals": out.internals,
            "latency_ms": round((time.perf_counter() - t0) * 1000, 1),
            "budget": None,
        }, None)

    return Work(plan, compute, lm)
