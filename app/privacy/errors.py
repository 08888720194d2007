"""Errors raised by the privacy math on bad input."""

from __future__ import annotations


class PrivacyInputError(ValueError):
    """Bad input to a privacy computation.

    ``param`` names the offending field with the name the HTTP body and the
    CLI use (``target_epsilon``, ``delta``, ``orders`` ...), so that the API can
    answer 422 naming the field and the CLI can print a one-line message.
    """

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def __str__(self) -> str:  # one line, field first
        return f"{self.param}: {self.message}" if self.param else self.message
