"""Private exemplar sets as the API and /ui show them, and their creation: the service below the dataset routes,
the sample loader and the dashboard (no route module imports another, and /ui imports none)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.api.dataset_schemas import DatasetMeta
from app.budget.ledger import Ledger
from app.store import budget_repo
from app.store import datasets_repo as repo

__all__ = ["DEFAULT_TEMPLATES", "budget_object", "dataset_object", "default_template", "ledger_entry_object",
           "store_dataset"]

DEFAULT_TEMPLATES: dict[str, dict[str, Any]] = {
    "classification": {
        "instruction": "Classify the text into one of the given labels.",
        "input_prefix": "Text:",
        "output_prefix": "Label:",
    },
    "generation": {"instruction": "Answer the question.", "input_prefix": "Input:", "output_prefix": "Output:"},
}


def default_template(task: str) -> dict[str, Any]:
    return dict(DEFAULT_TEMPLATES[task])


def budget_object(acc) -> dict[str, Any] | None:
    if acc is None:
        return None
    return {
        "epsilon": acc.epsilon_budget,
        "delta": acc.delta_budget,
        "adjacency": acc.adjacency,
        "epsilon_spent": acc.epsilon_spent,
        "epsilon_remaining": max(0.0, acc.epsilon_budget - acc.epsilon_spent),
        "charges": acc.charges,
        "composition": acc.composition_method,
    }


def dataset_object(ds, acc=None) -> dict[str, Any]:
    return {
        "id": ds.id,
        "object": "dataset",
        "name": ds.name,
        "task": ds.task,
        "labels": ds.labels,
        "exemplar_count": ds.exemplar_count,
        "label_counts": ds.label_counts,
        "template": ds.template,
        "created_at": ds.created_at.isoformat() if isinstance(ds.created_at, datetime) else ds.created_at,
        "answer_reuse": bool(ds.answer_reuse),
        "budget": budget_object(acc),
        "visibility": getattr(ds, "visibility", None) or "private",
        "provenance": getattr(ds, "provenance", None),
    }


def ledger_entry_object(e) -> dict[str, Any]:
    """One ledger entry as the API shows it (also the /ui ledger table): never the released answer."""
    return {"id": e.id, "object": "ledger_entry", "created_at": e.created_at.isoformat(), "key_id": e.key_id,
            "mechanism": e.mechanism, "params": e.params, "epsilon": e.epsilon, "delta": e.delta,
            "idempotency_key": e.idempotency_key, "status": e.status,
            "refunded_at": e.refunded_at.isoformat() if e.refunded_at else None,
            "epsilon_spent_after": e.epsilon_spent_after}



def store_dataset(rt: Any, tenant: str, meta: DatasetMeta, rows: list[tuple[str, str]],
                  template: dict[str, Any]) -> dict[str, Any]:
    """Store a validated set and open its budget account in one transaction; its API object."""
    with rt.db.session() as s:
        ds = repo.create_dataset(s, tenant_id=tenant, name=meta.name, task=meta.task, labels=meta.labels or [],
                                 template=template, exemplars=rows, answer_reuse=meta.answer_reuse)
        b = meta.budget
        Ledger().open_account(
            s, dataset_id=ds.id, tenant_id=tenant,
            epsilon=b.epsilon if b else rt.settings.default_budget_epsilon,
            delta=b.delta if b else rt.settings.default_budget_delta,
            adjacency=(b.adjacency if b and b.adjacency else rt.settings.default_adjacency),
        )
        s.commit()
        return dataset_object(ds, budget_repo.get_account(s, ds.id, tenant))
