"""``GET /v1/datasets/{id}/budget/forecast``: how many more answers the dataset's budget pays for.

    ?mechanism=rnm&epsilon=1&delta=1e-5&partitions=8     -> answers_remaining
    ?mechanism=rnm&delta=1e-5&partitions=8&answers=1000  -> the largest per-answer epsilon for 1000 answers

Every query parameter other than ``mechanism``, ``answers``, ``max_tokens``, ``model`` and
``embedder`` is a mechanism parameter, exactly as ``/v1/private/classify`` (classification
sets) or ``/v1/private/generate`` (generation sets) take it; values are read as JSON where
they parse (``1e-5``, ``true``, ``8``) and as strings otherwise (``noise=laplace``). The
per-answer cost comes from the same function those routes charge
(``app.answers.private.cost_of``) and the count from ``app.budget.forecast``,
which composes as the ledger does.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool

from app.api.json_route import JSONRoute
from app.api.auth import SCOPES, require
from app.api.deps import RuntimeDep, TenantDep
from app.answers.errors import AnswerError
from app.answers.flow import mechanism_error
from app.api.errors import APIError, dataset_not_found
from app.api.schemas import BudgetForecast
from app.store import budget_repo, datasets_repo

router = APIRouter(route_class=JSONRoute, prefix="/v1/datasets", tags=["datasets"])

RESERVED = ("mechanism", "answers", "max_tokens", "model", "embedder")
_COST_KEYS = ("epsilon", "delta", "adjacency", "mechanism", "method", "is_private")


def _value(raw: str) -> Any:
    try:
        v = json.loads(raw)
    except (json.JSONDecodeError, ValueError):
        return raw
    return v if isinstance(v, (int, float, bool, str)) or v is None else raw


def _int_param(q: dict[str, str], name: str, lo: int, hi: int) -> int | None:
    if name not in q:
        return None
    try:
        v = int(q[name])
    except ValueError:
        raise APIError(422, f"{name} must be an integer, got {q[name]!r}", param=name, code="invalid_value") from None
    if not lo <= v <= hi:
        raise APIError(422, f"{name} must be in [{lo}, {hi}], got {v}", param=name, code="invalid_value")
    return v


@router.get("/{dataset_id}/budget/forecast", response_model=BudgetForecast, response_model_exclude_unset=True,
            dependencies=[Depends(require(*SCOPES))])
async def forecast(dataset_id: str, request: Request, rt: RuntimeDep, tenant: TenantDep):
    from app.budget.forecast import ANSWERS_LIMIT, count_answers, largest_epsilon
    from app.budget.ledger import charge_of, state_of

    items = list(request.query_params.multi_items())
    seen: set[str] = set()
    for k, _ in items:
        if k in seen:
            raise APIError(422, f"query parameter {k!r} given twice", param=k, code="invalid_value")
        seen.add(k)
    q = dict(items)
    answers = _int_param(q, "answers", 1, ANSWERS_LIMIT)
    max_tokens = _int_param(q, "max_tokens", 1, 512)
    mech_params = {k: _value(v) for k, v in q.items() if k not in RESERVED}
    if answers is not None and "epsilon" in mech_params:
        raise APIError(422, "give epsilon (how many answers fit?) or answers (which epsilon fits?), not both",
                       param="epsilon", code="invalid_value")

    def _load():
        with rt.db.session() as s:
            ds = datasets_repo.get_dataset(s, dataset_id, tenant)
            acc = budget_repo.get_account(s, dataset_id, tenant) if ds is not None else None
            if ds is None or acc is None:
                return None
            s.expunge(acc)
            return ds.task, dict(ds.template or {}), ds.exemplar_count, acc

    loaded = await run_in_threadpool(_load)
    if loaded is None:
        raise dataset_not_found(dataset_id)
    task, template, n_exemplars, acc = loaded
    cost_at = _cost_function(rt, task, q.get("mechanism"), mech_params, acc, template, n_exemplars, max_tokens)

    base, assumed = cost_at(None if answers is not None else mech_params.get("epsilon"),
                                 tolerate_epsilon=answers is not None)
    state = state_of(acc)
    out: dict[str, Any] = {
        "object": "budget.forecast",
        "dataset_id": dataset_id,
        "task": task,
        "mechanism": assumed["mechanism"],
        "params": assumed["params"],
        "adjacency": acc.adjacency,
        "budget": {"epsilon": acc.epsilon_budget, "delta": acc.delta_budget, "epsilon_spent": acc.epsilon_spent,
                   "epsilon_remaining": max(0.0, acc.epsilon_budget - acc.epsilon_spent), "charges": acc.charges,
                   "composition": acc.composition_method},
        "composition": "the ledger's: the smallest of basic composition (sum of each answer's epsilon, when the "
                       "deltas sum within the budget's), RDP composition converted at the budget's delta, and "
                       "PLD composition of the Gaussian and pure-epsilon answers (with the others by RDP, the "
                       "delta split optimised); see docs/budget.md",
        "assumes": "every forecast answer is a fresh private answer with these parameters and this same cost "
                   "(the cost is data-independent); nothing else is charged or refunded meanwhile; answers "
                   "reused from identical earlier requests are free and not counted",
    }
    if not assumed["charged"]:  # the private route's own rule (zero_shot reads no exemplar)
        out.update(charged=False, per_answer=_cost_view(base.reported) if base else None, answers_remaining=None,
                   note=f"{assumed['mechanism']} is never charged to the ledger")
        return out

    if answers is None:
        n = await run_in_threadpool(count_answers, state, charge_of(base.event), acc.epsilon_budget,
                                    acc.delta_budget)
        out.update(charged=True, per_answer=_cost_view(base.reported), answers_remaining=n.answers,
                   answers_remaining_is_lower_bound=n.capped, epsilon_spent_after=n.epsilon_spent_after,
                   composition_after=n.method)
        return out

    def charge_for(e: float):
        try:
            costed, _ = cost_at(e, tolerate_epsilon=False)
        except AnswerError:
            return None
        return charge_of(costed.event)

    fit = await run_in_threadpool(largest_epsilon, answers, state, charge_for, acc.epsilon_budget,
                                  acc.delta_budget)
    if fit.epsilon is None:
        raise APIError(422, f"{answers} answers of mechanism {assumed['mechanism']!r} do not fit the remaining "
                       f"budget at any per-answer epsilon tried (down to {acc.epsilon_budget * 2.0 ** -40:.3g})",
                       param="answers", code="answers_do_not_fit")
    costed, assumed = cost_at(fit.epsilon, tolerate_epsilon=False)
    n = await run_in_threadpool(count_answers, state, charge_of(costed.event), acc.epsilon_budget, acc.delta_budget)
    out.update(charged=True, answers=answers, epsilon=fit.epsilon, epsilon_refused=fit.epsilon_refused,
               params=assumed["params"], per_answer=_cost_view(costed.reported), answers_remaining=n.answers,
               answers_remaining_is_lower_bound=n.capped, epsilon_spent_after=n.epsilon_spent_after,
               composition_after=n.method,
               search=f"largest per-answer epsilon (the mechanism's epsilon parameter) at which {answers} answers "
                      f"fit, bisected to relative width 1e-6; epsilon_refused is the smallest value tried that "
                      f"does not fit")
    return out


def _cost_view(cost: dict[str, Any]) -> dict[str, Any]:
    out = {k: cost.get(k) for k in _COST_KEYS if k in cost}
    out["rdp_curve"] = bool(cost.get("orders") and cost.get("rdp"))
    return out


def _cost_function(rt, task: str, mechanism: str | None, mech_params: dict[str, Any], acc, template,
                   n_exemplars: int, max_tokens: int | None):
    """cost_at(epsilon) -> (Costed: the reported cost and its typed event, what was assumed), through the
    answer service's own cost path (``app.answers.private.cost_of``): the forecast and the ledger agree."""
    from app.answers.private import cost_of, is_charged, nonprivate_refused
    from app.mechanisms.errors import MechanismParamError
    from app.mechanisms.protocol import mechanism_for

    if task == "classification" and max_tokens is not None:
        raise APIError(422, "max_tokens applies to generation sets only", param="max_tokens", code="invalid_value")
    try:
        mech = mechanism_for(task, mechanism or ("rnm" if task == "classification" else "esa"))
    except MechanismParamError as exc:
        raise mechanism_error(exc) from None
    if task == "generation" and not mech.is_private and mech.reads_exemplars \
            and not rt.settings.allow_nonprivate_baselines:
        raise nonprivate_refused(mech.name)
    charged = is_charged(mech)

    def cost_at(epsilon, *, tolerate_epsilon: bool):
        params = dict(mech_params)
        if epsilon is not None:
            params["epsilon"] = epsilon
        if task == "generation":
            params.update(template=template, max_tokens=max_tokens)
        try:
            costed = cost_of(rt, mech, params, account_adjacency=acc.adjacency, n_exemplars=n_exemplars)
        except AnswerError as exc:
            if tolerate_epsilon and exc.param == "epsilon":
                shown = {k: v for k, v in params.items() if k not in ("template", "max_tokens")}
                return None, {"mechanism": mech.name, "params": shown, "charged": charged}
            raise
        assumed = json.loads(json.dumps(mech.describe(costed.parsed), default=str))
        return costed, {"mechanism": mech.name, "params": assumed, "charged": charged}

    return cost_at
