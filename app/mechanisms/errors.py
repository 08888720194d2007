"""Errors raised by the mechanisms on bad input."""

from __future__ import annotations


class MechanismParamError(ValueError):
    """A mechanism parameter (or its combination with the input) is invalid.

    ``param`` names the offending field as the HTTP body spells it
    (``partitions``, ``shots_per_partition``, ``epsilon``, ``clip`` ...), so that
    the API can answer 422 naming it. Messages never quote exemplar text.
    """

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def __str__(self) -> str:
        return f"{self.param}: {self.message}" if self.param else self.message


class UnknownMechanismError(MechanismParamError, KeyError):
    """No mechanism of that name is registered (param ``mechanism``)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return MechanismParamError.__str__(self)
