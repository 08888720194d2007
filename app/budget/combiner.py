"""Group commit for the ledger's charges: the charges of one account that arrive while one of its
transactions is under way are made together in the next (one lock, one account update, one commit).

Why (issue 27): a charge holds its account's lock (PostgreSQL's row lock; SQLite's one write lock) from
its ``UPDATE ... RETURNING`` to its commit, over several statements with Python between them. Under
load each step also waits for the GIL, so the lock is held for many times the charge's own work and
the charges of one dataset queue behind it: two replicas on PostgreSQL, 64 clients, tiny model, a
charge took ~400-500 ms of wall time for ~4 ms of CPU. Batching is the database's own answer to a
hot commit path (group commit): one holder does the work of everyone waiting.

Exactness: ``Ledger.charge_many`` charges a batch's requests one after the other in arrival order,
each composing the total its predecessors left, as separate transactions would in the same order;
the batch commits as a whole before any of its answers is released, so nothing is released
uncharged, and a failed commit fails every answer of the batch (none released, none charged).

The protocol (flat combining with a hand-off): a request joins its account's queue; if no thread is
serving that account it serves it: takes up to ``max_batch`` queued requests, commits them in one
transaction, gives each its result, then hands the role to the oldest request still queued (its
thread wakes and serves the next batch) and returns. So a thread serves at most one batch, its own
request included, and every queued request is served by the batch after the current one or the next
``queue / max_batch`` ones. No thread waits on anything but a transaction under way.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from app.budget.ledger import ChargeRequest, ChargeResult, Ledger, charge_of

MAX_BATCH = 64


class _Slot:
    __slots__ = ("request", "done", "result", "serve")

    def __init__(self, request: ChargeRequest) -> None:
        self.request = request
        self.done = threading.Event()
        self.result: ChargeResult | BaseException | None = None
        self.serve = False  # woken to serve the next batch rather than with a result


class _Queue:
    __slots__ = ("pending", "busy")

    def __init__(self) -> None:
        self.pending: deque[_Slot] = deque()
        self.busy = False


class ChargeCombiner:
    """One per process (the runtime's). ``write_session``: a context manager factory whose session the
    batch's transaction runs in (``Database.write_session``); it is committed here."""

    def __init__(self, write_session: Callable[[], AbstractContextManager[Any]], ledger: Ledger | None = None,
                 max_batch: int = MAX_BATCH) -> None:
        if max_batch < 1:
            raise ValueError("max_batch >= 1")
        self._write_session = write_session
        self._ledger = ledger or Ledger()
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._queues: dict[tuple[str, str], _Queue] = {}
        self.batches = 0  # transactions tried, and the requests in them (metrics, tests)
        self.requests = 0

    def charge(self, *, dataset_id: str, tenant_id: str, request: ChargeRequest) -> ChargeResult:
        """``Ledger.charge`` of ``request`` on the account, committed (with others queued for the same
        account, if any); raises what the ledger would raise for it."""
        charge_of(request.cost)  # a malformed request fails alone, before it could join a batch
        key = (dataset_id, tenant_id)
        slot = _Slot(request)
        with self._lock:
            q = self._queues.get(key)
            if q is None:
                q = self._queues[key] = _Queue()
            q.pending.append(slot)
            serve = not q.busy
            q.busy = True
        if not serve:
            slot.done.wait()  # a result, or the role: set by a thread whose transaction is under way
            if not slot.serve:
                return _outcome(slot)
        self._serve(key, q)
        return _outcome(slot)

    def _serve(self, key: tuple[str, str], q: _Queue) -> None:
        with self._lock:
            batch = [q.pending.popleft() for _ in range(min(self._max_batch, len(q.pending)))]
        try:
            results = self._commit(key, batch)
        except BaseException as exc:  # the transaction failed: no request of the batch was charged
            results = [exc] * len(batch)
        finally:
            with self._lock:
                self.batches += 1
                self.requests += len(batch)
                if q.pending:
                    nxt = q.pending[0]
                    nxt.serve = True
                    nxt.done.set()
                else:
                    q.busy = False
                    del self._queues[key]
        for slot, res in zip(batch, results):
            slot.result = res
            slot.serve = False
            slot.done.set()

    def _commit(self, key: tuple[str, str], batch: list[_Slot]) -> list[ChargeResult | Exception]:
        with self._write_session() as s:
            results = self._ledger.charge_many(s, dataset_id=key[0], tenant_id=key[1],
                                               requests=[slot.request for slot in batch])
            s.commit()
        return results


def _outcome(slot: _Slot) -> ChargeResult:
    res = slot.result
    if isinstance(res, BaseException):
        raise res
    assert res is not None
    return res
