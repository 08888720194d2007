"""A dataset with an open budget account, for the ledger's tests."""

from __future__ import annotations

from app.budget.ledger import Ledger
from app.store import Database, datasets_repo


def open_dataset(db: Database, epsilon: float, delta: float = 1e-5) -> str:
    """A dataset of tenant ``t1`` with a budget account of (epsilon, delta), replace-one adjacency."""
    with db.session() as s:
        ds = datasets_repo.create_dataset(s, tenant_id="t1", name="x", task="classification", labels=["a", "b"],
                                          template={}, exemplars=[("in", "a")])
        Ledger().open_account(s, dataset_id=ds.id, tenant_id="t1", epsilon=epsilon, delta=delta,
                              adjacency="replace-one")
        s.commit()
        return ds.id
