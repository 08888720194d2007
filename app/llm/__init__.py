"""Model backends behind one small batched protocol, and the bundled default models.

See docs/models.md. No FastAPI, no SQL, no global configuration: everything
arrives as arguments.
"""

from .bundled import BUNDLED, bundled_specs
from .errors import CapabilityError, ContextTooLong, LLMError, ModelLoadError
from .loader import load_model, resolve_device, resolve_dtype
from .types import Capabilities, Embedder, Generation, LanguageModel, ModelSpec


def __getattr__(name: str) -> type:
    # DecodeSession pulls in torch; keep ``import app.llm`` light for code that only needs the types.
    if name == "DecodeSession":
        from .decode import DecodeSession

        return DecodeSession
    raise AttributeError(f"module 'app.llm' has no attribute {name!r}")


__all__ = [
    "BUNDLED",
    "Capabilities",
    "CapabilityError",
    "ContextTooLong",
    "DecodeSession",
    "Embedder",
    "Generation",
    "LLMError",
    "LanguageModel",
    "ModelLoadError",
    "ModelSpec",
    "bundled_specs",
    "load_model",
    "resolve_device",
    "resolve_dtype",
]
