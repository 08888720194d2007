"""The budget ledger service: charge before release, refund on failure, idempotent.

Flow of a private answer (app/api): the mechanism computes its answer; the
ledger charges its cost in one transaction that locks the dataset's account,
composes the charge with every earlier live charge and refuses it if the total
would exceed the budget; only a committed charge lets the answer out. The
released response is stored on the entry, so a retry with the same idempotency
key gets the same answer back and is never charged twice (also after a crash
between charge and release). An identical request (same ``reuse_key``: normalized query,
mechanism, parameters, model) may get the stored answer of an earlier live charge at no
cost: releasing a released answer again is post-processing (Dwork & Roth 2014, Prop. 2.1).
A charge whose output is never released is refunded (a synthesize job cancelled before its set is
stored): the entry stays, marked ``refunded``, and the account's sums are recomputed from the live
entries. A private answer is charged only after its model work succeeded, and released right after the
commit, so the answer path has nothing to refund.

Unit of work: every method takes the caller's session and never commits or rolls back; the caller
owns the transaction (one transaction per charge: lock, compose, write entry, update account). Costs
arrive typed (``app.privacy.accountant.PrivacyCost``), never as dicts to re-parse.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sqlalchemy.orm import Session

from app.budget.composition import BudgetState, Charge, compose, fits
from app.privacy.accountant import PrivacyCost
from app.privacy.pld import PldSpec
from app.privacy.rdp import DEFAULT_ORDERS, rdp_on_grid
from app.store import budget_repo as repo
from app.store.base import utcnow


class BudgetExhausted(Exception):
    def __init__(self, epsilon_budget: float, epsilon_spent: float, epsilon_would_be: float) -> None:
        super().__init__("privacy budget exhausted")
        self.epsilon_budget = epsilon_budget
        self.epsilon_spent = epsilon_spent
        self.epsilon_would_be = epsilon_would_be

    @property
    def remaining(self) -> float:
        return max(0.0, self.epsilon_budget - self.epsilon_spent)


class LedgerConflict(Exception):
    """The idempotency key was used with a different request."""


class NoBudgetAccount(LookupError):
    pass


@dataclass(frozen=True)
class ChargeRequest:
    """One charge to make (``Ledger.charge``'s arguments but the account's)."""

    cost: PrivacyCost
    mechanism: str
    params: dict[str, Any]
    response: dict[str, Any]
    key_id: str | None = None
    idempotency_key: str | None = None
    reuse_key: str | None = None
    reuse: bool = False


@dataclass(frozen=True)
class ChargeResult:
    entry_id: int
    epsilon_spent: float
    epsilon_budget: float
    delta_budget: float
    replayed_response: dict[str, Any] | None = None  # set when an idempotent retry hit a stored answer
    reused: bool = False  # the stored answer of an identical earlier request, released again at no cost
    released_at: Any = None  # when the reused answer was first released

    @property
    def remaining(self) -> float:
        return max(0.0, self.epsilon_budget - self.epsilon_spent)


def state_of(acc: Any) -> BudgetState:
    """The running sums of a budget account row, for composition (the ledger, the forecast, the UI)."""
    return BudgetState(
        orders=np.asarray(acc.rdp_orders, dtype=float),
        rdp_sum=BudgetState.rdp_from_json(acc.rdp_sum),
        basic_epsilon=acc.basic_epsilon,
        basic_delta=acc.basic_delta,
        nocurve_epsilon=acc.nocurve_epsilon,
        nocurve_delta=acc.nocurve_delta,
        charges=acc.charges,
        pld_counts=dict(acc.pld_counts or {}),
        # None: an account from before PLD composition, every curve so far in the RDP group.
        rest_rdp=BudgetState.rdp_from_json(acc.rest_rdp) if acc.rest_rdp is not None else None,
    )


def _store_state(session: Session, acc: Any, state: BudgetState, spent: float, method: str) -> None:
    """Write the account's new composition state (one UPDATE by key, in the caller's transaction)."""
    repo.store_account(session, acc, rdp_sum=state.rdp_json(), basic_epsilon=state.basic_epsilon,
                       basic_delta=state.basic_delta, nocurve_epsilon=state.nocurve_epsilon,
                       nocurve_delta=state.nocurve_delta, charges=state.charges, pld_counts=dict(state.pld_counts),
                       rest_rdp=state.rest_json(), epsilon_spent=spent, composition_method=method,
                       updated_at=utcnow())


def _json_curve(values) -> list[float | None]:
    return [float(x) if math.isfinite(x) else None for x in values]


def charge_of(cost: PrivacyCost) -> Charge:
    """What the ledger composes of a typed cost: its own (epsilon, delta), its RDP curve when known and
    its dominating pair (PLD) when it has one and a curve."""
    if not isinstance(cost, PrivacyCost):
        raise TypeError(f"a ledger charge takes a PrivacyCost, got {type(cost).__name__}")
    has_curve = bool(cost.orders) and bool(cost.rdp)
    return Charge(epsilon=float(cost.epsilon), delta=float(cost.delta),
                  orders=cost.orders if has_curve else None, rdp=cost.rdp if has_curve else None,
                  pld=cost.pld if has_curve and math.isfinite(cost.epsilon) else None)


class Ledger:
    """The ledger's rules over the caller's session (see the module docstring: it never commits)."""

    def open_account(self, session: Session, *, dataset_id: str, tenant_id: str, epsilon: float, delta: float,
                     adjacency: str) -> None:
        state = BudgetState()
        repo.create_account(
            session, dataset_id=dataset_id, tenant_id=tenant_id, adjacency=adjacency, epsilon_budget=epsilon,
            delta_budget=delta, epsilon_spent=0.0, composition_method=None, rdp_orders=list(DEFAULT_ORDERS),
            rdp_sum=state.rdp_json(), basic_epsilon=0.0, basic_delta=0.0, nocurve_epsilon=0.0, nocurve_delta=0.0,
            charges=0, version=0, pld_counts={}, rest_rdp=state.rest_json(),
        )

    @staticmethod
    def _account(session: Session, dataset_id: str, tenant_id: str, account: Any) -> Any:
        """``account`` when the caller read it in this transaction already, else read now."""
        return account if account is not None else repo.get_account(session, dataset_id, tenant_id)

    def replay(self, session: Session, *, dataset_id: str, tenant_id: str, idempotency_key: str, mechanism: str,
               params: dict[str, Any], account: Any = None) -> ChargeResult | None:
        """The stored answer of an earlier charge with this key, or None. ``account``: the account row
        as the caller read it in this transaction (saves reading it again)."""
        acc = self._account(session, dataset_id, tenant_id, account)
        prior = repo.find_entry(session, dataset_id, idempotency_key) if acc is not None else None
        if acc is None or prior is None or prior.status != "charged":
            return None
        if prior.mechanism != mechanism or prior.params != params:
            raise LedgerConflict(idempotency_key)
        return ChargeResult(prior.id, acc.epsilon_spent, acc.epsilon_budget, acc.delta_budget,
                            replayed_response=prior.response)

    def reuse(self, session: Session, *, dataset_id: str, tenant_id: str, reuse_key: str,
              account: Any = None) -> ChargeResult | None:
        """The stored answer of an earlier live charge of an identical request, or None (no charge)."""
        acc = self._account(session, dataset_id, tenant_id, account)
        prior = repo.find_reusable(session, dataset_id, reuse_key) if acc is not None else None
        if acc is None or prior is None:
            return None
        return ChargeResult(prior.id, acc.epsilon_spent, acc.epsilon_budget, acc.delta_budget,
                            replayed_response=prior.response, reused=True, released_at=prior.created_at)

    def precheck(self, session: Session, *, dataset_id: str, tenant_id: str, cost: PrivacyCost,
                 account: Any = None) -> None:
        """Refuse early (no lock, no model work) when the charge cannot fit; ``charge`` decides for real."""
        acc = self._account(session, dataset_id, tenant_id, account)
        if acc is None:
            raise NoBudgetAccount(dataset_id)
        spent, _ = compose(state_of(acc).add(charge_of(cost)), acc.delta_budget)
        if not fits(spent, acc.epsilon_budget):
            raise BudgetExhausted(acc.epsilon_budget, acc.epsilon_spent, spent)

    def charge(self, session: Session, *, dataset_id: str, tenant_id: str, cost: PrivacyCost, mechanism: str,
               params: dict[str, Any], response: dict[str, Any], key_id: str | None = None,
               idempotency_key: str | None = None, reuse_key: str | None = None,
               reuse: bool = False) -> ChargeResult:
        """Charge ``cost`` and record ``response`` as released; raise BudgetExhausted when over budget.

        Takes the account's lock first, so concurrent charges on one dataset serialise and each composes
        the previous one's committed total. ``reuse_key`` is stored on the entry (a later identical
        request may reuse this answer); with ``reuse``, an identical request charged meanwhile (a
        concurrent twin) is found under the lock and its answer returned instead: this one is dropped
        unreleased, uncharged. Only a fresh charge writes (the caller commits; on a replay or a reuse
        it may commit too: nothing but the lock's version counter changed).
        """
        req = ChargeRequest(cost=cost, mechanism=mechanism, params=params, response=response, key_id=key_id,
                            idempotency_key=idempotency_key, reuse_key=reuse_key, reuse=reuse)
        (out,) = self.charge_many(session, dataset_id=dataset_id, tenant_id=tenant_id, requests=[req])
        if isinstance(out, Exception):
            raise out
        return out

    def charge_many(self, session: Session, *, dataset_id: str, tenant_id: str,
                    requests: Sequence[ChargeRequest]) -> list[ChargeResult | Exception]:
        """``charge`` for several requests on one account in one transaction (group commit,
        app.budget.combiner): the account is locked once and the requests are charged one after the
        other in their order, each composing the total its predecessors left, exactly as the same
        charges in as many transactions would; the account is written once. A request that cannot be
        charged (BudgetExhausted, LedgerConflict) gets its exception in its place and leaves the total
        as it was; an unknown account is a NoBudgetAccount for every request."""
        charges = [charge_of(req.cost) for req in requests]  # a TypeError before the lock, as before
        acc = repo.lock_account_row(session, dataset_id, tenant_id)
        if acc is None:
            return [NoBudgetAccount(dataset_id) for _ in requests]
        state, spent, method = state_of(acc), acc.epsilon_spent, None
        out: list[ChargeResult | Exception] = []
        for req, c in zip(requests, charges):
            try:
                res, new = self._charge_one(session, acc, state, spent, dataset_id, tenant_id, req, c)
            except (BudgetExhausted, LedgerConflict) as exc:
                out.append(exc)
                continue
            if new is not None:
                state, spent, method = new
            out.append(res)
        if method is not None:
            _store_state(session, acc, state, spent, method)
        return out

    @staticmethod
    def _charge_one(session: Session, acc: Any, state: BudgetState, spent_now: float, dataset_id: str,
                    tenant_id: str, req: ChargeRequest,
                    c: Charge) -> tuple[ChargeResult, tuple[BudgetState, float, str] | None]:
        """One charge (``c``, of ``req.cost``) on the locked account whose composition state is ``state``
        (total ``spent_now``): its result and, for a fresh charge, the new (state, total, route); None
        for a replay or a reuse."""
        if req.idempotency_key:
            prior = repo.find_entry(session, dataset_id, req.idempotency_key)
            if prior is not None and prior.status == "charged":
                if prior.mechanism != req.mechanism or prior.params != req.params:
                    raise LedgerConflict(req.idempotency_key)
                return ChargeResult(prior.id, spent_now, acc.epsilon_budget, acc.delta_budget,
                                    replayed_response=prior.response), None
        if req.reuse and req.reuse_key:
            twin = repo.find_reusable(session, dataset_id, req.reuse_key)
            if twin is not None:
                return ChargeResult(twin.id, spent_now, acc.epsilon_budget, acc.delta_budget,
                                    replayed_response=twin.response, reused=True, released_at=twin.created_at), None
        new_state = state.add(c)
        spent, method = compose(new_state, acc.delta_budget)
        if not fits(spent, acc.epsilon_budget):
            raise BudgetExhausted(acc.epsilon_budget, spent_now, spent)
        # The entry keeps its curve on the account's grid, so a refund can recompose exactly.
        curve = None
        if c.has_curve:
            curve = _json_curve(rdp_on_grid(c.orders, c.rdp, np.asarray(acc.rdp_orders, dtype=float)))
        entry_id = repo.add_entry(
            session, dataset_id=dataset_id, tenant_id=tenant_id, key_id=req.key_id, mechanism=req.mechanism,
            params=req.params, epsilon=c.epsilon, delta=c.delta, rdp=curve,
            pld=c.pld.to_dict() if c.pld is not None else None, idempotency_key=req.idempotency_key,
            status="charged", response=req.response, epsilon_spent_after=spent, reuse_key=req.reuse_key,
        )
        return ChargeResult(entry_id, spent, acc.epsilon_budget, acc.delta_budget), (new_state, spent, method)

    def refund(self, session: Session, *, dataset_id: str, tenant_id: str, entry_id: int) -> bool:
        """Refund one charge whose output was never released and recompute the totals; False when
        there is nothing to refund (unknown entry, or already refunded)."""
        acc = repo.lock_account(session, dataset_id, tenant_id)
        entry = repo.get_entry(session, entry_id)
        if acc is None or entry is None or entry.status != "charged" or entry.dataset_id != dataset_id:
            return False
        repo.mark_refunded(session, entry)
        session.flush()
        state = BudgetState(orders=np.asarray(acc.rdp_orders, dtype=float))
        for e in repo.live_entries(session, dataset_id):
            state = state.add(Charge(e.epsilon, e.delta, acc.rdp_orders if e.rdp is not None else None,
                                     [math.inf if x is None else x for x in e.rdp] if e.rdp is not None else None,
                                     PldSpec.from_dict(e.pld) if e.pld is not None and e.rdp is not None else None))
        spent, method = compose(state, acc.delta_budget)
        _store_state(session, acc, state, spent, method)
        return True
