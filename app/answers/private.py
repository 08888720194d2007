"""One private answer of any task through the one mechanism protocol (app/mechanisms/protocol.py):
the rules on parameters and cost (shared with the budget forecast), then the read phase's plan and
the model work that ``flow.answer`` runs. Classification and generation differ only in what they
check before (labels, embedder, decoding) and in the body they release."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.answers.errors import InvalidRequest, dataset_not_found
from app.answers.flow import AnswerPlan, Caller, Released, Work, mechanism_error, query_digest, reuse_key_of
from app.mechanisms.protocol import AnswerInputs, AnswerMechanism, MechanismOutput, typed
from app.privacy.accountant import PrivacyCost
from app.privacy.adjacency import Adjacency
from app.privacy.errors import PrivacyInputError
from app.runtime import Runtime
from app.store import datasets_repo


@dataclass(frozen=True)
class Costed:
    """A request's parameters resolved against the dataset's account, and their cost, before any model work."""

    parsed: Any
    reported: dict[str, Any]  # the cost as the mechanism reports it (what the forecast shows)
    charged: bool
    event: PrivacyCost | None  # the typed cost the ledger composes (None: uncharged)


def _same_adjacency(given: Any, account_adjacency: str) -> bool:
    """Whether a request's adjacency names the account's (aliases included); an unknown name is not."""
    try:
        return Adjacency.parse(given).value == account_adjacency
    except PrivacyInputError:
        return False


def _check_meaningful_budget(p: Mapping[str, Any]) -> None:
    """One rule for every private mechanism, before it calibrates: an epsilon below
    ``MIN_EPSILON`` is refused with the same 422 as ``/v1/privacy/calibrate`` (the mechanism's own
    checks name anything else)."""
    from app.privacy import _validate

    eps = p.get("epsilon")
    if isinstance(eps, (int, float)) and not isinstance(eps, bool) and 0 < eps < _validate.MIN_EPSILON:
        _validate.target_epsilon(eps, "epsilon")


def is_charged(mech: AnswerMechanism) -> bool:
    """Whether an answer of ``mech`` is charged to the ledger: everything that reads the private
    exemplars (a non-private baseline that reads them is charged its infinite epsilon: refused)."""
    return bool(mech.reads_exemplars)


def cost_of(rt: Runtime, mech: AnswerMechanism, params: Mapping[str, Any], *, account_adjacency: str | None,
            n_exemplars: int) -> Costed:
    """Parameters and cost of one answer, before any model work: the one path of the answer service
    and of the budget forecast, so both see the same charge. ``params`` holds the mechanism's
    parameters and, for generation, epsilon / delta / adjacency / max_tokens / template."""
    from app.mechanisms.errors import MechanismParamError

    p = {k: v for k, v in params.items() if v is not None}
    if mech.is_private and account_adjacency is not None:
        if "adjacency" not in p:
            p["adjacency"] = account_adjacency
        elif not _same_adjacency(p["adjacency"], account_adjacency):
            raise InvalidRequest(f"this dataset's budget is accounted under {account_adjacency!r} adjacency",
                                 param="adjacency", code="adjacency_mismatch")
    if not mech.is_private:
        if any(k in p for k in ("epsilon", "delta")):
            raise InvalidRequest(f"mechanism {mech.name!r} is not private: it takes no epsilon or delta",
                                 param="epsilon", code="not_private")
        if mech.reads_exemplars and not rt.settings.allow_nonprivate_baselines:
            raise nonprivate_refused(mech.name)
    if mech.task == "generation" and "adjacency" not in p:
        p["adjacency"] = account_adjacency or rt.settings.default_adjacency
    try:
        _check_meaningful_budget(p)
        parsed = mech.parse_params(p)
        reported = mech.reported_cost(parsed, n_exemplars)
        charged = is_charged(mech)
        # Typed here, once: a malformed cost fails before any model work.
        return Costed(parsed, reported, charged, typed(reported, charged))
    except (MechanismParamError, ValueError, KeyError, TypeError) as exc:
        raise mechanism_error(exc) from None


def run_mechanism(mech: AnswerMechanism, parsed: Any, inputs: AnswerInputs,
                  rng: np.random.Generator | None) -> MechanismOutput:
    """The model work of one answer; a parameter the mechanism rejects only at run time is a 422."""
    from app.llm.errors import ContextTooLong, WorkTooLarge
    from app.mechanisms.errors import MechanismParamError

    try:
        return mech.run(parsed, inputs, rng)
    except ContextTooLong as exc:  # the exemplars are bounded at upload: the query is what the caller can shorten
        raise InvalidRequest(f"{exc}: shorten the query, or put fewer exemplars in each prompt", param="query",
                             code="prompt_too_long") from None
    except WorkTooLarge as exc:  # the caller's choices (query, partitions, shots, tokens) set the work
        raise InvalidRequest(f"{exc} (DPICL_MAX_ANSWER_TOKENS): shorten the query, or ask for fewer "
                             "partitions, shots or tokens; nothing was charged", param="query",
                             code="request_too_large") from None
    except (MechanismParamError, ValueError) as exc:
        raise mechanism_error(exc) from None


def nonprivate_refused(name: str) -> InvalidRequest:
    return InvalidRequest(f"mechanism {name!r} puts the exemplars in the prompt without any privacy guarantee; "
                          "it is served only when DPICL_ALLOW_NONPRIVATE_BASELINES is set",
                          param="mechanism", code="not_private")


@dataclass(frozen=True)
class Ask:
    """One private request, as the service receives it from a route."""

    dataset_id: str
    query: str
    params: Mapping[str, Any]
    return_internals: bool
    seed: int | None
    idempotency_key: str | None
    reuse: bool = True


def private_work(rt: Runtime, s: Session, caller: Caller, mech: AnswerMechanism, ask: Ask, *, lm: Any,
                 embedder: Any = None, body: Callable[[MechanismOutput], dict[str, Any]],
                 public: Callable[[Any, list[Any], dict[str, Any]], Work] | None = None) -> Work:
    """The read phase of a private answer (in the read transaction ``s``): the dataset (a set of the
    mechanism's task that the caller may see) and its account, the exemplars when the mechanism reads
    them, the cost, the reuse key; then the model work as a function of the noise generator.
    ``public`` answers a public synthetic set (no ledger) when given. The dataset row and its account
    come in one query; the exemplars (immutable) from the runtime's cache (app/answers/dataset_cache.py),
    which this read of the row keeps honest: a set deleted anywhere is a 404 here."""
    from app.answers.dataset_cache import dataset_cache

    found = datasets_repo.get_dataset_with_account(s, ask.dataset_id, caller.tenant_id)
    if found is None:
        raise dataset_not_found(ask.dataset_id)
    ds, acc = found
    if ds.task != mech.task:
        other = "generate" if ds.task == "generation" else "classify"
        raise InvalidRequest(f"dataset {ask.dataset_id!r} is a {ds.task} set; use /v1/private/{other}",
                             param="dataset_id", code="wrong_task")
    template = dict(ds.template or {})
    exemplars: Sequence[tuple[str, str]] = dataset_cache(rt).exemplars(
        ds, lambda: datasets_repo.load_exemplars(s, ask.dataset_id)) if mech.reads_exemplars else []
    if public is not None and ((ds.visibility or "private") == "public" or mech.name == "synthetic_icl"):
        return public(ds, list(exemplars), template)
    if acc is None:  # a private set opens its account in the transaction that creates it
        raise dataset_not_found(ask.dataset_id)
    params = dict(ask.params)
    if mech.task == "generation":
        params["template"] = template
    costed = cost_of(rt, mech, params, account_adjacency=acc.adjacency,
                     n_exemplars=len(exemplars) if mech.reads_exemplars else int(ds.exemplar_count or 0))
    resolved = json.loads(json.dumps(mech.describe(costed.parsed), default=str))
    request_params = {"query_sha256": query_digest(ask.query), **resolved, "model": lm.name}
    extra: dict[str, Any] = {"labels": list(ds.labels), "template": template} if mech.task == "classification" \
        else {"template": template, "embedder": embedder.name if embedder is not None else None}
    # Seeded noise (tests, audits) is never reused, nor reuses another answer.
    route = "classify" if mech.task == "classification" else "generate"
    rkey = reuse_key_of(route, mech.name, ask.query, request_params, **extra) if ask.seed is None else None
    plan = AnswerPlan(ask.dataset_id, mech.name, costed.event, costed.charged, request_params, rkey,
                      rkey is not None and bool(ds.answer_reuse) and ask.reuse, ask.idempotency_key,
                      ask.return_internals, acc)
    inputs = AnswerInputs(lm, exemplars, ask.query, tuple(ds.labels or ()), template, embedder)

    def compute(rng: np.random.Generator | None) -> Released:
        t0 = time.perf_counter()
        out = run_mechanism(mech, costed.parsed, inputs, rng)
        released = body(out)
        released["latency_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        released["reused"] = False
        return Released(released, out.event)

    return Work(plan, compute, lm)
