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


@pytest.mark.parametrize("one_pass", [True, False])
def test_reuse_on_off_and_batching_agree(lm, header_prompts, one_pass):
    old = lm.one_pass_scoring
    lm.one_pass_scoring = one_pass
    try:
        with prefix_reuse(lm, False):
            lm.stats.reset()
            plain = np.stack([lm.continuation_logprobs([p], LABELS)[0] for p in header_prompts])
            plain_tokens = lm.stats.forward_tokens
        with prefix_reuse(lm, True):
            lm.stats.reset()
            shared = lm.continuation_logprobs(header_prompts, LABELS)
            shared_tokens = lm.stats.forward_tokens
    finally:
        lm.one_pass_scoring = old
    np.testing.assert_allclose(shared, plain, rtol=0, atol=2e-4)
    rows = [lm.tokenize(p) for p in header_prompts]
    labels = [lm.tokenizer(c, add_special_tokens=False)["input_ids"] for c in LABELS]
    common = min(next(i for i in range(len(r)) if r[i] != rows[0][i]) for r in rows[1:])
    if one_pass:
        # Exact token accounting: each prompt once with every label's tokens appended (one pass, the
        # prefix-sharing mask); with reuse the header once.
        appended = len(rows) * sum(len(c) for c in labels)
        assert plain_tokens == sum(len(r) for r in rows) + appended
        assert shared_tokens == common + sum(len(r) - common for r in rows) + appended
    else:
        # Two stages: each prompt but its last token once (stage 1), then
        # [last prompt token] + label for every pair (stage 2); with reuse the header once.
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


def test_single_token_fast_path_scores_the_same_labels(lm):
    """``single_token_fast_path`` (one next-token pass per prompt when every label is one token, as in
    both bundled tasks; the default since issue 27) against the two-stage path, on the bundled tasks'
    own prompts in the mechanisms' batch shapes (rnm / poe partitions, icl, calibration twins).

    Measured on the bundled model (float32, CPU) the two paths differ by up to ~1.8e-5; the two-stage
    path differs from *itself* by up to ~2.2e-5 when the same prompts are scored in another batch
    shape, and both are ~3e-5 from a float64 reference: the difference is float32 rounding of the same
    quantity (in float64 they agree to 1e-10: tests/llm/test_one_pass.py). This test pins it: same
    argmax, a difference no larger than the two-stage path's own batch-shape variation.
    """
    from app.icl import load_bundled

    old = lm.single_token_fast_path
    worst, self_worst = 0.0, 0.0
    try:
        for name in ("assistant_intents", "support_intents"):
            ds = load_bundled(name)
            ex = ds.exemplars("train")
            conts = ds.template.continuations(ds.labels)
            assert all(len(lm.tokenizer(c, add_special_tokens=False)["input_ids"]) == 1 for c in conts)
            for q in [e.input for e in ds.test[:2]]:
                batches = [
                    [ds.template.render([ex[i]], q, ds.labels, lm=lm) for i in range(4)],  # rnm, poe (T=4)
                    [ds.template.render(ex[:4], q, ds.labels, lm=lm)],  # icl
                    [ds.template.render(ex[:4], c, ds.labels, lm=lm) for c in (q, "N/A", "", "[MASK]")],
                ]
                for batch in batches:
                    got = {}
                    for fast in (False, True):
                        lm.single_token_fast_path = fast
                        lm.one_pass_scoring = fast
                        lm.clear_prefix_cache()
                        got[fast] = lm.continuation_logprobs(batch, conts)
                    lm.single_token_fast_path = lm.one_pass_scoring = False
                    lm.clear_prefix_cache()
                    one_at_a_time = np.concatenate([lm.continuation_logprobs([b], conts) for b in batch])
                    d = np.abs(got[True] - got[False])
                    worst = max(worst, float(d.max()))
                    self_worst = max(self_worst, float(np.abs(one_at_a_time - got[False]).max()))
                    assert (got[True].argmax(1) == got[False].argmax(1)).all()
    finally:
        lm.single_token_fast_path = lm.one_pass_scoring = old
        lm.clear_prefix_cache()
    assert worst <= 3e-5, worst  # float32 rounding of the same quantity, nothing more
    assert worst <= max(self_worst, 1e-5) * 1.5, (worst, self_worst)


def test_shared_prefix_pass_cached_mode(lm, header_prompts):
    """``shared_prefix_pass="cached"`` (what "auto" picks on CUDA): a batch's common prefix is taken
    from the LRU when there, never computed in a pass of its own; the scores are the same."""
    rows = [lm.tokenize(p) for p in header_prompts]
    labels = [lm.tokenizer(c, add_special_tokens=False)["input_ids"] for c in LABELS]
    one_pass = sum(len(r) for r in rows) + len(rows) * sum(len(c) for c in labels)  # every token once
    assert lm.shared_prefix_pass == "auto" and lm._compute_shared_prefix()  # CPU: computed
    old = lm.shared_prefix_pass
    try:
        with prefix_reuse(lm, True):
            ref = lm.continuation_logprobs(header_prompts, LABELS)
            lm.clear_prefix_cache()
            lm.shared_prefix_pass = "cached"
            lm.stats.reset()
            cold = lm.continuation_logprobs(header_prompts, LABELS)
            assert lm.stats.forward_tokens == one_pass  # no prefix pass
            lm.shared_prefix_pass = "always"
            lm.continuation_logprobs(header_prompts[:2], LABELS)  # caches the common header
            lm.shared_prefix_pass = "cached"
            lm.stats.reset()
            warm = lm.continuation_logprobs(header_prompts, LABELS)
            assert lm.stats.prefix_cache_hits >= 1
            assert lm.stats.forward_tokens < one_pass
        np.testing.assert_allclose(cold, ref, rtol=0, atol=2e-4)
        np.testing.assert_allclose(warm, ref, rtol=0, atol=2e-4)
    finally:
        lm.shared_prefix_pass = old
