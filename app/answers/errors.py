"""Why a private answer was refused, in the service's own words (no HTTP here).

The HTTP layer maps each ``kind`` to a status (app/api/errors.py); the CLI or a
notebook can catch the same exceptions. ``param`` names the offending request field
and ``code`` is the stable machine-readable reason, as in the API's error envelope.
"""

from __future__ import annotations

from typing import ClassVar


class AnswerError(Exception):
    kind: ClassVar[str] = "invalid"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class InvalidRequest(AnswerError):
    """The request cannot be answered as asked (bad parameters, wrong dataset task...)."""

    kind = "invalid"


class NotFound(AnswerError):
    """A dataset or model the caller may not see (absent, or another tenant's)."""

    kind = "not_found"


class Forbidden(AnswerError):
    """The caller's key lacks a scope the request needs."""

    kind = "forbidden"


class Conflict(AnswerError):
    """An idempotency key reused for a different request."""

    kind = "conflict"


class BudgetExhaustedError(AnswerError):
    """The charge would take the dataset's composed epsilon over its budget; nothing was run or charged."""

    kind = "budget_exhausted"

    def __init__(self, message: str, *, epsilon_spent: float, epsilon_remaining: float) -> None:
        super().__init__(message, param="epsilon", code="budget_exhausted")
        self.epsilon_spent = epsilon_spent
        self.epsilon_remaining = epsilon_remaining


class ClientGone(AnswerError):
    """The client closed the request before the release: nothing was released or charged."""

    kind = "client_gone"


def dataset_not_found(dataset_id: str) -> NotFound:
    return NotFound(f"dataset {dataset_id!r} not found", param="dataset_id", code="dataset_not_found")
