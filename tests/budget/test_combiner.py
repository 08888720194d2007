"""Group commit of charges (app.budget.combiner) on both databases: charges queued behind a transaction
are made together in the next one, exactly as serial charges in arrival order would be; a failed
batch charges none of its requests; every queued request is served (the hand-off)."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np
import pytest

from app.budget.combiner import ChargeCombiner
from app.budget.ledger import BudgetExhausted, ChargeRequest, Ledger, LedgerConflict, NoBudgetAccount
from app.privacy.accountant import PrivacyCost
from app.privacy.rdp import DEFAULT_ORDERS
from app.store import Database, budget_repo
from tests.budget.accounts import open_dataset


def _gaussian(sigma: float) -> PrivacyCost:
    orders = np.array(DEFAULT_ORDERS)
    rdp = orders / (2 * sigma**2)  # Mironov 2017 Prop. 7, sensitivity 1
    return PrivacyCost(epsilon=99.0, delta=1e-5, adjacency="replace-one", mechanism="rnm", orders=tuple(orders),
                       rdp=tuple(rdp))


def _request(sigma: float = 3.0, **kw) -> ChargeRequest:
    kw.setdefault("params", {"sigma": sigma})
    return ChargeRequest(cost=_gaussian(sigma), mechanism="rnm", response={"label": "a"}, **kw)


class GatedSessions:
    """``Database.write_session`` whose first transaction waits (after taking its batch) until the test
    opens the gate: every thread started meanwhile queues behind it, deterministically."""

    def __init__(self, db: Database, fail_first: bool = False) -> None:
        self.db = db
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.calls = 0
        self.fail_first = fail_first

    @contextmanager
    def __call__(self):
        self.calls += 1
        first = self.calls == 1
        with self.db.write_session() as s:
            if first:
                self.entered.set()
                assert self.gate.wait(30)
                if self.fail_first:
                    raise RuntimeError("the first batch's transaction fails")
            yield s


def _queued(comb: ChargeCombiner, n: int) -> bool:
    for _ in range(3000):
        with comb._lock:
            if sum(len(q.pending) for q in comb._queues.values()) >= n:
                return True
        threading.Event().wait(0.01)
    return False


def _run_queued(comb: ChargeCombiner, sessions: GatedSessions, ds: str, requests: list[ChargeRequest]) -> list:
    """The first request's transaction holds the gate while the others queue; then all run."""
    out: list = [None] * len(requests)

    def one(i: int) -> None:
        try:
            out[i] = comb.charge(dataset_id=ds, tenant_id="t1", request=requests[i])
        except Exception as exc:  # noqa: BLE001 - recorded for the assertions
            out[i] = exc

    first = threading.Thread(target=one, args=(0,))
    first.start()
    assert sessions.entered.wait(30)
    rest = [threading.Thread(target=one, args=(i,)) for i in range(1, len(requests))]
    for t in rest:
        t.start()
    assert _queued(comb, len(requests) - 1)
    sessions.gate.set()
    for t in [first, *rest]:
        t.join(60)
    return out


def test_queued_charges_share_one_transaction_and_equal_serial_charges(db):
    budget = 2.0
    ds, ref = open_dataset(db, budget), open_dataset(db, budget)
    sessions = GatedSessions(db)
    comb = ChargeCombiner(sessions)
    out = _run_queued(comb, sessions, ds, [_request() for _ in range(12)])
    assert (comb.batches, comb.requests) == (2, 12)  # the first alone, then the eleven queued behind it together
    charged = [r for r in out if not isinstance(r, Exception)]
    refused = [r for r in out if isinstance(r, BudgetExhausted)]
    assert len(charged) + len(refused) == 12 and refused and charged

    # The same charges one transaction each, in order, on a twin account: the same count, the same totals.
    serial = []
    for _ in range(12):
        try:
            with db.session() as s:
                serial.append(Ledger().charge(s, dataset_id=ref, tenant_id="t1", **vars(_request())))
                s.commit()
        except BudgetExhausted:
            pass
    assert len(serial) == len(charged)
    assert sorted(r.epsilon_spent for r in charged) == [r.epsilon_spent for r in serial]  # float-exact
    with db.session() as s:
        a, b = budget_repo.get_account(s, ds, "t1"), budget_repo.get_account(s, ref, "t1")
        assert (a.epsilon_spent, a.charges, a.rdp_sum) == (b.epsilon_spent, b.charges, b.rdp_sum)
        assert a.epsilon_spent <= budget < a.epsilon_spent + 1.0
        assert len(budget_repo.live_entries(s, ds)) == len(charged)
    for r in refused:
        assert r.epsilon_spent == max(c.epsilon_spent for c in charged)  # refused at the total it would exceed


def test_a_failed_batch_charges_none_of_its_requests_and_the_next_batch_is_served(db):
    ds = open_dataset(db, 100.0)
    sessions = GatedSessions(db, fail_first=True)
    comb = ChargeCombiner(sessions, max_batch=3)
    out = _run_queued(comb, sessions, ds, [_request() for _ in range(8)])
    assert isinstance(out[0], RuntimeError)  # the first batch (its own request only) failed
    assert all(not isinstance(r, Exception) for r in out[1:])  # seven more, in batches of at most 3
    assert (comb.batches, comb.requests) == (4, 8)
    with db.session() as s:
        assert budget_repo.get_account(s, ds, "t1").charges == 7
        assert len(budget_repo.live_entries(s, ds)) == 7


def test_twins_and_conflicts_inside_one_batch_behave_as_in_separate_transactions(db):
    ds = open_dataset(db, 100.0)
    sessions = GatedSessions(db)
    comb = ChargeCombiner(sessions)
    reqs = [_request(),  # the first batch, alone
            _request(idempotency_key="k1"), _request(idempotency_key="k1"),  # a retry: replayed, not charged
            _request(sigma=5.0, idempotency_key="k1"),  # the same key, other parameters: a conflict
            _request(reuse_key="q1", reuse=True), _request(reuse_key="q1", reuse=True)]  # a reusable twin
    out = _run_queued(comb, sessions, ds, reqs)
    assert comb.batches == 2
    first_k1 = [r for r in out[1:3] if r.replayed_response is None]
    assert len(first_k1) == 1 and any(r.replayed_response == {"label": "a"} for r in out[1:3])
    assert isinstance(out[3], LedgerConflict)
    fresh = [r for r in out[4:6] if not r.reused]
    assert len(fresh) == 1 and sum(r.reused for r in out[4:6]) == 1
    with db.session() as s:
        assert budget_repo.get_account(s, ds, "t1").charges == 3  # the first, one k1, one q1


def test_accounts_do_not_share_batches_and_an_unknown_account_fails_alone(db):
    a, b = open_dataset(db, 100.0), open_dataset(db, 100.0)
    comb = ChargeCombiner(db.write_session)
    results = {}

    def one(name: str, ds: str) -> None:
        try:
            results[name] = comb.charge(dataset_id=ds, tenant_id="t1", request=_request())
        except Exception as exc:  # noqa: BLE001
            results[name] = exc

    ts = [threading.Thread(target=one, args=(f"{ds}-{i}", ds)) for i in range(5) for ds in (a, b, "nope")]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert sum(isinstance(r, NoBudgetAccount) for r in results.values()) == 5
    with db.session() as s:
        assert budget_repo.get_account(s, a, "t1").charges == 5
        assert budget_repo.get_account(s, b, "t1").charges == 5
    assert not comb._queues  # nothing left behind


def test_a_malformed_request_fails_alone_before_joining_a_batch(db):
    ds = open_dataset(db, 100.0)
    comb = ChargeCombiner(db.write_session)
    with pytest.raises(TypeError):
        comb.charge(dataset_id=ds, tenant_id="t1",
                    request=ChargeRequest(cost={"epsilon": 1.0}, mechanism="rnm", params={}, response={}))  # type: ignore[arg-type]
    assert comb.batches == 0
    assert comb.charge(dataset_id=ds, tenant_id="t1", request=_request()).epsilon_spent > 0
