"""Remote backend: :class:`RemoteEmbedder`, the Embedder protocol over ``/v1/embeddings``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ModelLoadError
from ..types import Capabilities, ModelSpec
from .capabilities import _HINTS
from .transport import RemoteError, RemoteOptions, Transport

log = logging.getLogger(__name__)


# -------------------------------------------------------------------- embedder


class RemoteEmbedder:
    """An embedding model behind an OpenAI-compatible ``/v1/embeddings`` (vLLM ``--task embed``)."""

    backend = "remote"

    def __init__(self, spec: ModelSpec, opts: RemoteOptions, transport: Transport | None = None):
        self.name = spec.name
        self.spec = spec
        self.opts = opts
        self.transport = transport or Transport(opts, label=f"embedder {spec.name!r}")
        self.model_id = opts.served_model_name or ""
        self._dim: int | None = None
        self._max_context = opts.max_context

    def _url(self, path: str) -> str:
        return self.opts.base_url + path[len("/v1"):]

    def connect(self) -> RemoteEmbedder:
        label = f"embedder {self.name!r} (remote backend, {self.opts.public_url})"
        try:
            listing = self.transport.run(self.transport.request("GET", self._url("/v1/models")))
        except RemoteError as exc:
            raise ModelLoadError(f"{label}: cannot list the server's models: {exc}") from None
        ids = [str(m.get("id")) for m in (listing.get("data") or []) if isinstance(m, dict)]
        if not self.model_id:
            if len(ids) != 1:
                raise ModelLoadError(f"{label}: the server serves {ids or 'no models'}; set options.served_model_name")
            self.model_id = ids[0]
        elif self.model_id not in ids:
            raise ModelLoadError(f"{label}: the server does not serve {self.model_id!r} (it serves {ids})")
        try:
            self._dim = int(self.transport.run(self._embed_chunk(["dimension probe"])).shape[1])
        except (RemoteError, ValueError) as exc:
            raise ModelLoadError(f"{label} lacks the capability 'embeddings': {exc}; {_HINTS['embeddings']}") from None
        return self

    def capabilities(self) -> Capabilities:
        return Capabilities(
            backend=self.backend, full_vocab_logprobs=False, continuation_scoring=False, generation=False,
            chat_template=False, embeddings=True, max_context=self._max_context, vocab_size=None,
            embedding_dim=self._dim, device="remote", dtype="server",
        )

    @property
    def dim(self) -> int:
        return int(self._dim or 0)

    async def _embed_chunk(self, texts: list[str]) -> np.ndarray:
        body = await self.transport.request(
            "POST", self._url("/v1/embeddings"), {"model": self.model_id, "input": texts, "encoding_format": "float"}
        )
        try:
            data = sorted(body["data"], key=lambda d: d["index"])
            emb = np.asarray([d["embedding"] for d in data], dtype=np.float64)
        except (KeyError, TypeError, ValueError):
            raise RemoteError(f"embedder {self.name!r}: unreadable /v1/embeddings answer: {str(body)[:200]}",
                              public=f"embedder {self.name!r}: unreadable /v1/embeddings answer") from None
        if emb.ndim != 2 or emb.shape[0] != len(texts):
            raise RemoteError(f"embedder {self.name!r}: {emb.shape[0]} embeddings for {len(texts)} texts")
        return emb

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(N, D) float32, unit L2 norm; chunks of ``embed_batch_size`` texts, requests in parallel."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not one string")
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        n = self.opts.embed_batch_size
        chunks = [list(texts[i:i + n]) for i in range(0, len(texts), n)]

        async def go() -> list[Any]:
            return await self.transport.gather([self._embed_chunk(c) for c in chunks])

        emb = np.concatenate(self.transport.run(go()), axis=0)
        norms = np.linalg.norm(emb, axis=1, keepdims=True)
        return (emb / np.maximum(norms, 1e-12)).astype(np.float32)

    def close(self) -> None:
        self.transport.close()

    def __repr__(self) -> str:
        return f"RemoteEmbedder(name={self.name!r}, server={self.opts.public_url!r}, model={self.model_id!r})"
