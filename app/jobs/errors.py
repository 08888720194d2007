"""Exceptions of the job system.

Kinds raise :class:`JobError` (or a subclass) for failures a user can act on;
:class:`JobCancelled`, :class:`JobShutdown` and :class:`JobLost` are raised by
``ctx.progress`` and unwind a running kind at its next progress point.
"""

from __future__ import annotations


class JobError(Exception):
    """A failure with a message written for the user who submitted the job.

    ``param`` names the config field at fault (``config.<field>``), when one is.
    """

    code = "job_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code:
            self.code = code


class JobConfigError(JobError):
    """The config passed its schema but cannot run (raised before queueing, or by a kind at run time)."""

    code = "invalid_config"


class JobNotFoundError(JobConfigError):
    """The config names a resource of the caller's tenant that does not exist (HTTP 404 at submission:
    the request is well formed, the thing it points to is missing)."""

    code = "not_found"
    http_status = 404


class JobBudgetError(JobError):
    """The privacy budget cannot pay for the job (HTTP 429 at submission)."""

    code = "budget_exhausted"
    http_status = 429


class RetryableJobError(JobError):
    """A transient failure: the job goes back to the queue while attempts remain."""

    code = "transient_error"


class JobCancelled(Exception):
    """Cancellation was requested; the job stops at this progress point."""


class JobShutdown(Exception):
    """The worker is stopping; the job is handed back to the queue and runs again elsewhere."""


class JobLost(Exception):
    """This worker no longer owns the job (the reaper gave it to someone else)."""
