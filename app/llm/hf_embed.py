"""The in-process sentence-transformers backend (``backend="hf"``, kind "embedder")."""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import torch

from .scheduler import BatchScheduler, SchedulerOptions
from .types import Capabilities, ModelSpec


class HFEmbedder:
    """A sentence-transformers model behind the :class:`~app.llm.types.Embedder` protocol."""

    backend = "hf"

    def __init__(self, spec: ModelSpec, model: Any, *, device: torch.device | str, dtype: torch.dtype):
        self.name = spec.name
        self.spec = spec
        self.model = model
        self.device = torch.device(device)
        self.dtype = dtype
        opts = dict(spec.options or {})
        self.batch_size = int(opts.get("embed_batch_size", 64))
        get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        self._dim = int(get_dim())
        self._lock = threading.Lock()
        # Concurrent embed calls are coalesced like scoring calls (one tenant per batch by default). A
        # job's rows are its texts as Unicode code points (exact, and what sentence-transformers
        # tokenizes), so the scheduler's max_batch_tokens counts characters here.
        self.scheduler = BatchScheduler(spec.name, self._run_batch, SchedulerOptions.from_options(opts))

    def capabilities(self) -> Capabilities:
        return Capabilities(
            backend=self.backend,
            full_vocab_logprobs=False,
            continuation_scoring=False,
            generation=False,
            chat_template=False,
            embeddings=True,
            max_context=getattr(self.model, "max_seq_length", None),
            vocab_size=None,
            embedding_dim=self._dim,
            device=str(self.device),
            dtype=str(self.dtype).removeprefix("torch."),
        )

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(N, D) float32, unit L2 norm (texts longer than the model's max length are truncated)."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not one string")
        if len(texts) == 0:
            return np.zeros((0, self._dim), dtype=np.float32)
        return self.scheduler.submit(("embed",), [[ord(ch) for ch in str(t)] for t in texts])

    def _run_batch(self, key: Hashable, rows: list[list[int]]) -> np.ndarray:
        return self._encode(["".join(map(chr, r)) for r in rows])

    def _encode(self, texts: list[str]) -> np.ndarray:
        with self._lock, torch.inference_mode():
            emb = self.model.encode(
                list(texts),
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=False,
                show_progress_bar=False,
            )
        emb = np.asarray(emb, dtype=np.float64)
        norms = np.linalg.norm(emb, axis=1, keepdims=True)
        return (emb / np.maximum(norms, 1e-12)).astype(np.float32)

    def close(self) -> None:
        self.scheduler.close()

    def __repr__(self) -> str:
        return f"HFEmbedder(name={self.name!r}, dim={self._dim}, device={self.device})"
