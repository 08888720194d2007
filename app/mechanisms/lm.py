"""What the mechanisms call on a model, as structural types (no model code here).

Classification (``rnm``, ``poe``, the baselines: label scoring through ``app.icl``) and
answer-level generation (``esa``, ``ksa``, the generation baselines) take
``app.llm``'s :class:`~app.llm.types.LanguageModel` and :class:`~app.llm.types.Embedder`
protocols as they are (imported for type checking only: the mechanisms never import a
backend at run time). Token-level decoding (``clip_softmax``, ``poe`` decoding,
``mozo``, ``synthesize``) also needs an incremental decode session, which a backend
may lack: :class:`DecodingModel` lists what ``app.mechanisms.gen_decode`` calls, and
:func:`supports_decoding` is the run-time check that narrows a ``LanguageModel``
to it (the hf and remote backends have it; a test double may not).
"""

from __future__ import annotations

from typing import Protocol, Sequence, TypeGuard

import numpy as np

__all__ = ["DecodingModel", "StepSession", "supports_decoding"]


class StepSession(Protocol):
    """An open decode session over s sequences (``app.llm.decode.DecodeSession``)."""

    @property
    def logits(self) -> np.ndarray: ...

    def step(self, tokens: int) -> np.ndarray: ...

    def close(self) -> None: ...


class DecodingModel(Protocol):
    """The decode-session half of a backend: what token-level decoding calls."""

    def tokenize(self, text: str) -> list[int]: ...

    def detokenize(self, token_ids: Sequence[int]) -> str: ...

    def start_decode(
        self, prompts: Sequence[str] | Sequence[Sequence[int]], *, reuse_prefix: bool = True
    ) -> StepSession: ...


def supports_decoding(lm: object) -> TypeGuard[DecodingModel]:
    """Whether ``lm`` offers incremental decoding (``start_decode``)."""
    return hasattr(lm, "start_decode")
