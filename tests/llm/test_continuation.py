"""Continuation scoring: exact token-by-token log-probabilities of multi-token labels."""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import prefix_reuse, reference_next_logprobs

LABELS = [" World", " Sports", " Business", " Technology", " Sci/Tech", " science and technology"]


def hand_written_score(lm, prompt: str, continuation: str) -> float:
    """sum_j log p(c_j | prompt, c_<j): one plain forward pass per continuation token."""
    p = lm.tokenize(prompt)
    c = lm.tokenizer(continuation, add_special_tokens=False)["input_ids"]
    return float(sum(reference_next_logprobs(lm, p + c[:j])[c[j]] for j in range(len(c))))


def test_labels_are_multi_token(lm):
    lengths = [len(lm.tokenizer(x, add_special_tokens=False)["input_ids"]) for x in LABELS]
    assert max(lengths) >= 3 and min(lengths) == 1


def test_equals_hand_written_computation(lm, header_prompts):
    prompts = header_prompts[:2] + ["The capital of France is"]
    labels = [" World", " Technology", " Sci/Tech", " science and technology"]
    with prefix_reuse(lm, True):
        got = lm.continuation_logprobs(prompts, labels)
    assert got.shape == (3, len(labels)) and got.dtype == np.float64
    want = np.array([[hand_written_score(lm, p, c) for c in labels] for p in prompts])
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-4)  # sums of up to 4 float32 terms


def test_single_token_label_equals_next_token_logprob(lm, header_prompts):
    tech = lm.tokenizer(" Technology", add_special_tokens=False)["input_ids"]
    assert len(tech) == 1
    cont = lm.continuation_logprobs(header_prompts, [" Technology"])[:, 0]
    nxt = lm.next_token_logprobs(header_prompts)[:, tech[0]]
    np.testing.assert_allclose(cont, nxt, rtol=0, atol=1e-4)


def test_reuse_on_off_and_batching_agree(lm, header_prompts):
    with prefix_reuse(lm, False):
        lm.stats.reset()
        plain = np.stack([lm.continuation_logprobs([p], LABELS)[0] for p in header_prompts])
        plain_tokens = lm.stats.forward_tokens
    with prefix_reuse(lm, True):
        lm.stats.reset()
        shared = lm.continuation_logprobs(header_prompts, LABELS)
        shared_tokens = lm.stats.forward_tokens
    np.testing.assert_allclose(shared, plain, rtol=0, atol=2e-4)
    # Exact token accounting: each prompt but its last token once (stage 1), then
    # [last prompt token] + label for every pair (stage 2); with reuse the header once.
    rows = [lm.tokenize(p) for p in header_prompts]
    labels = [lm.tokenizer(c, add_special_tokens=False)["input_ids"] for c in LABELS]
    common = min(next(i for i in range(len(r)) if r[i] != rows[0][i]) for r in rows[1:])
    pairs = len(rows) * sum(1 + len(c) for c in labels)
    assert plain_tokens == sum(len(r) - 1 for r in rows) + pairs
    assert shared_tokens == common + sum(len(r) - 1 - common for r in rows) + pairs
    naive = sum(len(r) + len(c) for r in rows for c in labels)  # one row per (prompt, label)
    assert shared_tokens < naive / 3


def test_edge_cases(lm):
    out = lm.continuation_logprobs(["Hello there", "A"], ["", " friend"])
    assert out[0, 0] == 0.0 and out[1, 0] == 0.0  # log p(empty continuation) = 0
    assert out[0, 1] < 0 and out[1, 1] < 0
    assert lm.continuation_logprobs(["x"], []).shape == (1, 0)
    assert lm.continuation_logprobs([], [" a"]).shape == (0, 1)
    with pytest.raises(TypeError):
        lm.continuation_logprobs(["x"], " a")
