"""Background audit jobs: kinds, the job row's state machine, runners, webhooks.

Layering: above ``app.store`` (all SQL in ``app.jobs.repository``) and below
``app.api``; kinds call into the library layers (``app.privacy``, ``app.audit``...).
See docs/jobs.md.
"""

from app.jobs.context import JobContext
from app.jobs.errors import JobCancelled, JobConfigError, JobError, RetryableJobError
from app.jobs.registry import JobKind, epsilon_verdict, register

__all__ = [
    "JobCancelled",
    "JobConfigError",
    "JobContext",
    "JobError",
    "JobKind",
    "RetryableJobError",
    "epsilon_verdict",
    "register",
]
