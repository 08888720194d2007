"""Errors raised by the model layer.

Messages name the missing thing (package, file, capability) so that an API
layer can pass them to a client unchanged.
"""

from __future__ import annotations


class LLMError(Exception):
    """Base class of every error raised by ``app.llm``."""


class ModelLoadError(LLMError):
    """A model could not be located, converted or loaded."""


class CapabilityError(LLMError, ValueError):
    """A backend was asked for something it cannot do (or the input cannot be served)."""


class ContextTooLong(CapabilityError):
    """A prompt (with its continuation) does not fit the model's context window."""


class WorkTooLarge(LLMError):
    """One answer's model work would pass its token budget (``tenancy.work_scope``): refused before the
    call that would pass it runs (nothing of that call is computed)."""

    def __init__(self, message: str, *, tokens: int, limit: int, what: str = "") -> None:
        super().__init__(message)
        self.tokens, self.limit, self.what = tokens, limit, what
