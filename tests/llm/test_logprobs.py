"""Next-token log-probabilities: proper distributions, batching invariance, prefix reuse."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from app.llm import CapabilityError
from app.llm.hf import plan_chunks

from .conftest import prefix_reuse, reference_next_logprobs

ATOL = 1e-4  # float32 forward passes; observed differences are ~5e-5 at log-probabilities near -47


def test_rows_are_log_distributions(lm, mixed_prompts):
    lp = lm.next_token_logprobs(mixed_prompts)
    assert lp.shape == (8, lm.capabilities().vocab_size) and lp.dtype == np.float32
    lse = np.logaddexp.reduce(lp.astype(np.float64), axis=1)
    np.testing.assert_allclose(lse, 0.0, atol=1e-4)
    assert np.all(lp <= 0)


def test_batch_equals_single_calls(lm, mixed_prompts):
    with prefix_reuse(lm, True):
        batch = lm.next_token_logprobs(mixed_prompts)
    with prefix_reuse(lm, False):
        singles = np.stack([lm.next_token_logprobs([p])[0] for p in mixed_prompts])
    np.testing.assert_allclose(batch, singles, rtol=0, atol=ATOL)


def test_matches_plain_transformers_forward(lm, mixed_prompts):
    with prefix_reuse(lm, True):
        batch = lm.next_token_logprobs(mixed_prompts)
    for i, p in enumerate(mixed_prompts):
        ref = reference_next_logprobs(lm, lm.tokenize(p))
        np.testing.assert_allclose(batch[i], ref, rtol=0, atol=ATOL, err_msg=f"prompt {i}")


def test_shared_prefix_is_computed_once(lm, header_prompts):
    rows = [lm.tokenize(p) for p in header_prompts]
    common = 0
    while all(len(r) > common and r[common] == rows[0][common] for r in rows):
        common += 1
    assert common > 30, "the chat header + instruction should be a long shared prefix"
    with prefix_reuse(lm, False):
        lm.stats.reset()
        plain = lm.next_token_logprobs(header_prompts)
        assert lm.stats.forward_tokens == sum(len(r) for r in rows)
    with prefix_reuse(lm, True):
        lm.stats.reset()
        shared = lm.next_token_logprobs(header_prompts)
        # the prefix once, then every suffix: exactly the tokens a prefix tree needs
        assert lm.stats.forward_tokens == common + sum(len(r) - common for r in rows)
        assert lm.stats.reused_tokens == common * len(rows)
    np.testing.assert_allclose(shared, plain, rtol=0, atol=ATOL)


def test_prefix_lru_serves_later_calls(lm, header_prompts):
    with prefix_reuse(lm, True):
        lm.next_token_logprobs(header_prompts[:2])
        lm.stats.reset()
        lp = lm.next_token_logprobs([header_prompts[2]])
        n = len(lm.tokenize(header_prompts[2]))
        assert lm.stats.prefix_cache_hits == 1
        assert lm.stats.forward_tokens < n // 2, "the header came from the LRU, not recomputed"
    ref = reference_next_logprobs(lm, lm.tokenize(header_prompts[2]))
    np.testing.assert_allclose(lp[0], ref, rtol=0, atol=ATOL)


def test_small_batch_budget_chunks_give_same_numbers(lm, mixed_prompts):
    old = lm.max_batch_tokens
    try:
        with prefix_reuse(lm, True):
            full = lm.next_token_logprobs(mixed_prompts)
            lm.max_batch_tokens = 64  # forces one or two rows per forward pass
            lm.stats.reset()
            chunked = lm.next_token_logprobs(mixed_prompts)
            assert lm.stats.forward_calls >= 4
    finally:
        lm.max_batch_tokens = old
    np.testing.assert_allclose(chunked, full, rtol=0, atol=ATOL)


def test_plan_chunks_weighs_padding_against_passes():
    # 3 short rows and 2 long ones: one pass pads the short rows to 50 tokens (5 x 50 = 250 tokens
    # + 16); two passes compute 3 x 10 + 2 x 50 = 130 tokens + 2 x 16
    lengths = [50, 10, 10, 50, 10]
    assert plan_chunks(lengths, 0, rows_per_item=1, max_tokens=8192, chunk_cost=16) == [[1, 2, 4], [0, 3]]
    assert plan_chunks(lengths, 0, rows_per_item=1, max_tokens=8192, chunk_cost=0) == [[1, 2, 4, 0, 3]]
    assert plan_chunks(lengths, 0, rows_per_item=1, max_tokens=8192, chunk_cost=200) == [[1, 2, 4, 0, 3]]
    # lengths close together: padding never pays for a pass
    assert plan_chunks([30, 31, 29, 32], 20, rows_per_item=5, max_tokens=8192, chunk_cost=16) == [[2, 0, 1, 3]]
    # the token budget still holds (rows_per_item x items x (fixed + longest)); a lone item may exceed it
    many = plan_chunks([10] * 25, 0, rows_per_item=1, max_tokens=100, chunk_cost=16)
    assert sorted(i for c in many for i in c) == list(range(25)) and max(len(c) for c in many) <= 10
    assert plan_chunks([500, 5], 0, rows_per_item=1, max_tokens=100, chunk_cost=16) == [[1], [0]]
    assert plan_chunks([], 0, rows_per_item=1, max_tokens=100, chunk_cost=16) == []


def test_padding_aware_chunks_give_same_numbers_with_less_padding(lm, mixed_prompts):
    """Rows of very different lengths (1 to ~60 tokens) split into passes of similar lengths: fewer
    tokens computed, the same numbers as one prompt at a time (next-token and continuation scores)."""
    labels = [" World", " Sports and more", " Business"]
    old = lm.pass_cost_tokens
    try:
        with prefix_reuse(lm, False):
            singles = np.stack([lm.next_token_logprobs([p])[0] for p in mixed_prompts])
            cont_singles = np.stack([lm.continuation_logprobs([p], labels)[0] for p in mixed_prompts])
            seen = {}
            for cost in (0, 16):
                lm.pass_cost_tokens = cost
                lm.stats.reset()
                got = lm.next_token_logprobs(mixed_prompts)
                cont = lm.continuation_logprobs(mixed_prompts, labels)
                seen[cost] = (lm.stats.forward_calls, lm.stats.padded_tokens)
                np.testing.assert_allclose(got, singles, rtol=0, atol=ATOL, err_msg=f"pass cost {cost}")
                np.testing.assert_allclose(cont, cont_singles, rtol=0, atol=2e-4, err_msg=f"pass cost {cost}")
    finally:
        lm.pass_cost_tokens = old
    assert seen[16][0] > seen[0][0] and seen[16][1] < seen[0][1], seen


def test_concurrent_callers_get_their_own_answers(lm, mixed_prompts):
    expected = lm.next_token_logprobs(mixed_prompts)
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            results[i] = lm.next_token_logprobs([mixed_prompts[i], mixed_prompts[(i + 3) % 8]])
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(0, 8, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(0, 8, 2):
        np.testing.assert_allclose(results[i][0], expected[i], atol=ATOL)
        np.testing.assert_allclose(results[i][1], expected[(i + 3) % 8], atol=ATOL)


def test_tokenize_adds_no_bos_for_smollm2(lm):
    # SmolLM2's tokenizer prepends nothing: the prompt's tokens are the text's tokens.
    text = "<|im_start|>user\nhello<|im_end|>\n"
    assert lm.tokenize(text) == lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert lm.tokenize(text)[0] == lm.tokenizer.convert_tokens_to_ids("<|im_start|>")


def test_bad_inputs(lm):
    with pytest.raises(CapabilityError, match="empty"):
        lm.next_token_logprobs([""])
    with pytest.raises(TypeError):
        lm.next_token_logprobs("a string, not a list")
    with pytest.raises(CapabilityError, match="max context"):
        lm.next_token_logprobs(["word " * 9000])
    assert lm.next_token_logprobs([]).shape == (0, lm.vocab_size)
    assert issubclass(CapabilityError, ValueError)


def test_forward_refuses_only_a_row_left_with_no_token_and_counts_real_tokens(lm):
    """``_forward`` takes its counts from the rows' lengths and checks for a fully masked row only
    when some row adds no token: a row with nothing cached and nothing new is refused (it would be
    NaN); a row that adds nothing after a cached token is fine; padding is not counted as tokens."""
    from app.llm.kv import KVBatch

    with lm._lock:
        with pytest.raises(RuntimeError, match="no real token"):
            lm._forward(KVBatch.empty(2, lm.device), [[1, 2], []])
        kv = KVBatch.empty(2, lm.device)
        lm.stats.reset()
        lm._forward(kv, [[1, 2, 3], [4]])
        assert (lm.stats.forward_tokens, lm.stats.padded_tokens, lm.stats.forward_rows) == (4, 6, 2)
        hidden = lm._forward(kv, [[5], []])  # row 1 adds nothing: its cached token keeps it unmasked
        assert hidden is not None and bool(torch.isfinite(hidden[0]).all())
        assert (lm.stats.forward_tokens, lm.stats.padded_tokens) == (5, 8)
        assert kv.lengths.tolist() == [4, 1]
