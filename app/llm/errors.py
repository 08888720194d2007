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
