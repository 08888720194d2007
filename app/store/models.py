"""Every table, registered on ``Base.metadata`` (Alembic's env imports this module).

Each change to a table ships with a static, reversible Alembic revision in
migrations/versions (date-prefixed file name).
"""

from app.store.base import DEFAULT_TENANT
from app.store.dataset_tables import Dataset, Exemplar
from app.store.gateway_tables import ApiKey, BudgetAccount, LedgerEntry
from app.store.job_tables import AuditJob, JobArtifact

__all__ = [
    "DEFAULT_TENANT", "Dataset", "Exemplar", "AuditJob", "JobArtifact", "ApiKey", "BudgetAccount", "LedgerEntry",
]
