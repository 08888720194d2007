"""Generation (greedy, sampled, stops) and the incremental DecodeSession."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.llm import Generation

from .conftest import reference_next_logprobs


def _chat(lm, text: str) -> str:
    return lm.apply_chat_template([{"role": "user", "content": text}])


def test_greedy_is_deterministic_and_matches_transformers(lm):
    prompt = "The capital of France is"
    a = lm.generate([prompt], max_new_tokens=12)
    b = lm.generate([prompt], max_new_tokens=12)
    assert a == b
    ids = torch.tensor([lm.tokenize(prompt)])
    with torch.inference_mode():
        ref = lm.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)
    assert a[0].token_ids == ref[0, ids.shape[1]:].tolist()
    assert a[0].finish_reason == "length" and len(a[0].token_ids) == 12
    assert a[0].text == lm.tokenizer.decode(a[0].token_ids, skip_special_tokens=True)


def test_batched_greedy_equals_single(lm):
    prompts = [_chat(lm, "What is 2+2?"), "The capital of France is", "Once upon a time"]
    batch = lm.generate(prompts, max_new_tokens=8)
    singles = [lm.generate([p], max_new_tokens=8)[0] for p in prompts]
    assert batch == singles


def test_eos_stops_generation(lm):
    out = lm.generate([_chat(lm, "What is 2+2?")], max_new_tokens=40)[0]
    assert out.finish_reason == "stop"
    assert out.token_ids[-1] in lm.eos_token_ids
    assert "<|im_end|>" not in out.text and out.text.strip()


def test_sampling_with_seed_repeats(lm):
    prompts = ["Once upon a time", "My favourite food is"]
    a = lm.generate(prompts, max_new_tokens=10, temperature=1.0, top_p=0.95, seed=1234)
    b = lm.generate(prompts, max_new_tokens=10, temperature=1.0, top_p=0.95, seed=1234)
    c = lm.generate(prompts, max_new_tokens=10, temperature=1.0, top_p=0.95, seed=99)
    assert a == b
    assert [g.token_ids for g in a] != [g.token_ids for g in c]


def test_stop_strings(lm):
    prompt = "One, two, three, four,"
    full = lm.generate([prompt], max_new_tokens=12)[0]
    assert "," in full.text.strip(), full.text
    stop = lm.generate([prompt], max_new_tokens=12, stop=[","])[0]
    assert stop.finish_reason == "stop"
    assert stop.text == full.text[: full.text.index(",")]
    assert "," not in stop.text


def test_argument_checks(lm):
    assert lm.generate(["x"], max_new_tokens=0) == [Generation("", [], "length")]
    assert lm.generate([], max_new_tokens=3) == []
    with pytest.raises(ValueError):
        lm.generate(["x"], top_p=0.0)
    with pytest.raises(ValueError):
        lm.generate(["x"], temperature=-1.0)


def test_decode_session_matches_full_forward(lm):
    prompts = [_chat(lm, "Name a colour."), _chat(lm, "Name a large animal that lives in the sea."), "Hello"]
    session = lm.start_decode(prompts)
    rows = [lm.tokenize(p) for p in prompts]
    rng = np.random.default_rng(0)
    for step in range(3):
        logits = session.logits
        assert logits.shape == (3, lm.vocab_size) and logits.dtype == np.float32
        lp = session.logprobs()
        for i in range(3):
            np.testing.assert_allclose(lp[i], reference_next_logprobs(lm, rows[i]), atol=1e-4)
        tokens = rng.integers(100, 20000, size=3).tolist()  # any tokens: the session must follow them
        session.step(tokens)
        for i in range(3):
            rows[i].append(tokens[i])
    assert session.lengths == [len(r) for r in rows]
    session.keep([2, 0])  # drop a sequence
    assert session.rows == [2, 0]
    session.step(7)  # an int goes to every live sequence
    lp = session.logprobs()
    np.testing.assert_allclose(lp[0], reference_next_logprobs(lm, rows[2] + [7]), atol=1e-4)
    np.testing.assert_allclose(lp[1], reference_next_logprobs(lm, rows[0] + [7]), atol=1e-4)
    session.close()
    with pytest.raises(RuntimeError):
        session.step(1)


def test_decode_session_fork_is_an_independent_copy(lm):
    prompts = [_chat(lm, "Name a colour."), "Hello", "The capital of France is"]
    rows = [lm.tokenize(p) for p in prompts]
    parent = lm.start_decode(prompts)
    parent.step([101, 202, 303])
    parent.keep([2, 0])  # a fork keeps the live rows and their original indices
    child = parent.fork()
    assert child.rows == [2, 0] and child.lengths == parent.lengths
    np.testing.assert_array_equal(child.logits, parent.logits)
    parent.step([11, 12])
    child.step([21, 22])  # different tokens: each follows its own, from the same cache
    assert parent.token_ids(2) == rows[2] + [303, 11] and child.token_ids(2) == rows[2] + [303, 21]
    for s, toks in ((parent, (11, 12)), (child, (21, 22))):
        lp = s.logprobs()
        np.testing.assert_allclose(lp[0], reference_next_logprobs(lm, rows[2] + [303, toks[0]]), atol=1e-4)
        np.testing.assert_allclose(lp[1], reference_next_logprobs(lm, rows[0] + [101, toks[1]]), atol=1e-4)
    parent.close()  # the fork owns its cache: it steps on after the parent is gone
    child.keep([1])
    child.step(7)
    np.testing.assert_allclose(child.logprobs()[0], reference_next_logprobs(lm, rows[0] + [101, 22, 7]), atol=1e-4)
    with pytest.raises(RuntimeError, match="closed"):
        parent.fork()
