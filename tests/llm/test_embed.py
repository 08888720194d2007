"""Sentence embeddings from the bundled all-MiniLM-L6-v2."""

from __future__ import annotations

import numpy as np
import pytest

TEXTS = [
    "The cat sat on the mat.",
    "A kitten is sitting on a rug.",
    "Quarterly earnings beat analyst expectations.",
    "",
    "word " * 400,  # longer than the model's 256-token window: truncated, still embedded
]


def test_dimension_and_unit_norm(embedder):
    caps = embedder.capabilities()
    assert caps.embeddings and caps.embedding_dim == 384 and not caps.generation
    e = embedder.embed(TEXTS)
    assert e.shape == (len(TEXTS), 384) and e.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)


def test_batch_equals_single_and_semantics(embedder):
    batch = embedder.embed(TEXTS[:3])
    singles = np.stack([embedder.embed([t])[0] for t in TEXTS[:3]])
    np.testing.assert_allclose(batch, singles, atol=1e-5)
    sim = batch @ batch.T
    assert sim[0, 1] > 0.5 > sim[0, 2]  # paraphrases close, unrelated texts far


def test_matches_sentence_transformers_directly(embedder):
    ref = embedder.model.encode(TEXTS[:2], normalize_embeddings=True)
    np.testing.assert_allclose(embedder.embed(TEXTS[:2]), ref, atol=1e-5)


def test_edge_cases(embedder):
    assert embedder.embed([]).shape == (0, 384)
    with pytest.raises(TypeError):
        embedder.embed("one string")
