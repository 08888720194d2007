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
A failed answer is refunded: the entry stays, marked
``refunded``, and the account's sums are recomputed from the live entries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.budget.composition import BudgetState, Charge, compose, fits
from app.privacy.rdp import DEFAULT_ORDERS, rdp_on_grid
from app.store import budget_repo as repo
from app.store.base import utcnow
from app.store.db import Database


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


def _state_of(acc) -> BudgetState:
    return BudgetState(
        orders=np.asarray(acc.rdp_orders, dtype=float),
        rdp_sum=BudgetState.rdp_from_json(acc.rdp_sum),
        basic_epsilon=acc.basic_epsilon,
        basic_delta=acc.basic_delta,
        nocurve_epsilon=acc.nocurve_epsilon,
        nocurve_delta=acc.nocurve_delta,
        charges=acc.charges,
    )


def _store_state(acc, state: BudgetState, spent: float, method: str) -> None:
    acc.rdp_sum = state.rdp_json()
    acc.basic_epsilon = state.basic_epsilon
    acc.basic_delta = state.basic_delta
    acc.nocurve_epsilon = state.nocurve_epsilon
    acc.nocurve_delta = state.nocurve_delta
    acc.charges = state.charges
    acc.epsilon_spent = spent
    acc.composition_method = method
    acc.updated_at = utcnow()


def _json_curve(values) -> list[float | None]:
    return [float(x) if math.isfinite(x) else None for x in values]


def charge_of(cost: dict[str, Any]) -> Charge:
    """A Charge from a PrivacyCost dict (``app.privacy.accountant.PrivacyCost.to_dict``)."""
    eps = cost.get("epsilon")
    rdp = cost.get("rdp")
    orders = cost.get("orders")
    return Charge(
        epsilon=math.inf if eps is None else float(eps),
        delta=float(cost.get("delta") or 0.0),
        orders=orders if (orders and rdp) else None,
        rdp=[math.inf if x is None else float(x) for x in rdp] if (orders and rdp) else None,
    )


class Ledger:
    def __init__(self, db: Database) -> None:
        self.db = db

    def open_account(self, session, *, dataset_id: str, tenant_id: str, epsilon: float, delta: float,
                     adjacency: str) -> None:
        state = BudgetState()
        repo.create_account(
            session, dataset_id=dataset_id, tenant_id=tenant_id, adjacency=adjacency, epsilon_budget=epsilon,
            delta_budget=delta, epsilon_spent=0.0, composition_method=None, rdp_orders=list(DEFAULT_ORDERS),
            rdp_sum=state.rdp_json(), basic_epsilon=0.0, basic_delta=0.0, nocurve_epsilon=0.0, nocurve_delta=0.0,
            charges=0, version=0,
        )

    def replay(self, *, dataset_id: str, tenant_id: str, idempotency_key: str, mechanism: str,
               params: dict[str, Any]) -> ChargeResult | None:
        """The stored answer of an earlier charge with this key, or None."""
        with self.db.session() as s:
            acc = repo.get_account(s, dataset_id, tenant_id)
            prior = repo.find_entry(s, dataset_id, idempotency_key) if acc is not None else None
            if prior is None or prior.status != "charged":
                return None
            if prior.mechanism != mechanism or prior.params != params:
                raise LedgerConflict(idempotency_key)
            return ChargeResult(prior.id, acc.epsilon_spent, acc.epsilon_budget, acc.delta_budget,
                                replayed_response=prior.response)

    def reuse(self, *, dataset_id: str, tenant_id: str, reuse_key: str) -> ChargeResult | None:
        """The stored answer of an earlier live charge of an identical request, or None (no charge)."""
        with self.db.session() as s:
            acc = repo.get_account(s, dataset_id, tenant_id)
            prior = repo.find_reusable(s, dataset_id, reuse_key) if acc is not None else None
            if prior is None:
                return None
            return ChargeResult(prior.id, acc.epsilon_spent, acc.epsilon_budget, acc.delta_budget,
                                replayed_response=prior.response, reused=True, released_at=prior.created_at)

    def precheck(self, *, dataset_id: str, tenant_id: str, cost: dict[str, Any]) -> None:
        """Refuse early (no lock, no model work) when the charge cannot fit; ``charge`` decides for real."""
        with self.db.session() as s:
            acc = repo.get_account(s, dataset_id, tenant_id)
            if acc is None:
                raise NoBudgetAccount(dataset_id)
            spent, _ = compose(_state_of(acc).add(charge_of(cost)), acc.delta_budget)
            if not fits(spent, acc.epsilon_budget):
                raise BudgetExhausted(acc.epsilon_budget, acc.epsilon_spent, spent)

    def charge(self, *, dataset_id: str, tenant_id: str, cost: dict[str, Any], mechanism: str,
               params: dict[str, Any], response: dict[str, Any], key_id: str | None = None,
               idempotency_key: str | None = None, reuse_key: str | None = None,
               reuse: bool = False) -> ChargeResult:
        """Charge ``cost`` and record ``response`` as released; raise BudgetExhausted when over budget.

        ``reuse_key`` is stored on the entry (a later identical request may reuse this answer);
        with ``reuse``, an identical request charged meanwhile (a concurrent twin) is found under
        the account's lock and its answer returned instead: this one is dropped unreleased, uncharged.
        """
        with self.db.session() as s:
            acc = repo.lock_account(s, dataset_id, tenant_id)
            if acc is None:
                raise NoBudgetAccount(dataset_id)
            if idempotency_key:
                prior = repo.find_entry(s, dataset_id, idempotency_key)
                if prior is not None and prior.status == "charged":
                    if prior.mechanism != mechanism or prior.params != params:
                        raise LedgerConflict(idempotency_key)
                    s.rollback()
                    return ChargeResult(prior.id, acc.epsilon_spent, acc.epsilon_budget, acc.delta_budget,
                                        replayed_response=prior.response)
            if reuse and reuse_key:
                twin = repo.find_reusable(s, dataset_id, reuse_key)
                if twin is not None:
                    s.rollback()
                    return ChargeResult(twin.id, acc.epsilon_spent, acc.epsilon_budget, acc.delta_budget,
                                        replayed_response=twin.response, reused=True, released_at=twin.created_at)
            c = charge_of(cost)
            new_state = _state_of(acc).add(c)
            spent, method = compose(new_state, acc.delta_budget)
            if not fits(spent, acc.epsilon_budget):
                s.rollback()
                raise BudgetExhausted(acc.epsilon_budget, acc.epsilon_spent, spent)
            # The entry keeps its curve on the account's grid, so a refund can recompose exactly.
            curve = None
            if c.has_curve:
                curve = _json_curve(rdp_on_grid(c.orders, c.rdp, np.asarray(acc.rdp_orders, dtype=float)))
            entry = repo.add_entry(
                s, dataset_id=dataset_id, tenant_id=tenant_id, key_id=key_id, mechanism=mechanism, params=params,
                epsilon=c.epsilon, delta=c.delta, rdp=curve, idempotency_key=idempotency_key, status="charged",
                response=response, epsilon_spent_after=spent, reuse_key=reuse_key,
            )
            _store_state(acc, new_state, spent, method)
            s.commit()
            return ChargeResult(entry.id, spent, acc.epsilon_budget, acc.delta_budget)

    def refund(self, *, dataset_id: str, tenant_id: str, entry_id: int) -> None:
        """Refund one charge (an answer that was not released) and recompute the totals."""
        with self.db.session() as s:
            acc = repo.lock_account(s, dataset_id, tenant_id)
            entry = repo.get_entry(s, entry_id)
            if acc is None or entry is None or entry.status != "charged":
                s.rollback()
                return
            repo.mark_refunded(s, entry)
            s.flush()
            state = BudgetState(orders=np.asarray(acc.rdp_orders, dtype=float))
            for e in repo.live_entries(s, dataset_id):
                state = state.add(Charge(e.epsilon, e.delta, acc.rdp_orders if e.rdp is not None else None,
                                         [math.inf if x is None else x for x in e.rdp] if e.rdp is not None else None))
            spent, method = compose(state, acc.delta_budget)
            _store_state(acc, state, spent, method)
            s.commit()
