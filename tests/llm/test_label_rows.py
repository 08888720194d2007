"""Label rows (issue 27): ``relative_continuation_logprobs`` reads only the labels' rows of the LM head.

For single-token labels it returns the labels' logits, i.e. ``continuation_logprobs`` less each row's
full-vocabulary logsumexp, which ``app.icl.score_labels`` cancels by renormalising over the labels;
multi-token labels (or the fast path off) fall back to ``continuation_logprobs`` itself.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from app.icl.scoring import renormalize, score_labels

from .conftest import model_folder, prefix_reuse

SINGLE = [" World", " Sports", " Business", " Technology"]
LABELS = [" World", " Sports", " Business", " Technology", " Sci/Tech", " science and technology"]


class WidestOutput(TorchDispatchMode):
    """The largest last dimension of any tensor an aten op returns (in this thread) while active."""

    def __init__(self) -> None:
        super().__init__()
        self.widest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.dim() > 0:
                self.widest = max(self.widest, int(t.shape[-1]))
        return out


def tiny(lm, dtype=torch.float32, **options):
    """A fresh 2-layer random-init model with SmolLM2's tokenizer, scoring in the caller's thread."""
    from app.llm.tiny import random_lm

    return random_lm(model_folder(lm), tiny=True, dtype=dtype, init_std=0.5, seed=2,
                     options={"scheduler": {"enabled": False}, **options})


@pytest.fixture(scope="module")
def tiny32(lm):
    return tiny(lm)


@contextlib.contextmanager
def keys_run(model):
    """Record the scheduler key of every batch ``model`` runs."""
    seen: list = []
    run = model.scheduler._run

    def spy(key, rows):
        seen.append(key[0])
        return run(key, rows)

    model.scheduler._run = spy
    try:
        yield seen
    finally:
        model.scheduler._run = run


def lse(model, prompts) -> np.ndarray:
    """Each prompt's full-vocabulary logsumexp of the next-token logits (a plain float64 computation)."""
    out = []
    with torch.inference_mode():
        for p in prompts:
            logits = model.model(input_ids=torch.tensor([model.tokenize(p)])).logits[0, -1].double()
            out.append(float(torch.logsumexp(logits, 0)))
    return np.array(out)


def test_single_token_labels_renormalise_like_full_logprobs_on_smollm2(lm, mixed_prompts):
    assert all(len(lm.tokenizer(c, add_special_tokens=False)["input_ids"]) == 1 for c in SINGLE)
    with prefix_reuse(lm, True):
        full = lm.continuation_logprobs(mixed_prompts, SINGLE)
        with keys_run(lm) as keys:
            rel = lm.relative_continuation_logprobs(mixed_prompts, SINGLE)
    assert keys == ["label"] and rel.shape == full.shape and rel.dtype == np.float64
    np.testing.assert_allclose(renormalize(rel), renormalize(full), rtol=0, atol=1e-5)
    # the per-prompt constant is the row's logsumexp (float32 rounding at |lse| ~ 20: ~1e-5)
    np.testing.assert_allclose(full - rel, -lse(lm, mixed_prompts)[:, None] * np.ones((1, len(SINGLE))),
                               rtol=0, atol=5e-4)
    assert np.abs(full - rel).min() > 1.0  # not log-probabilities: the constant is really dropped


def test_exact_in_float64_with_and_without_prefix_reuse(lm, mixed_prompts):
    m = tiny(lm, dtype=torch.float64)
    want = m.continuation_logprobs(mixed_prompts, SINGLE) + lse(m, mixed_prompts)[:, None]
    for reuse in (False, True):
        with prefix_reuse(m, reuse):
            got = m.relative_continuation_logprobs(mixed_prompts, SINGLE)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


def test_multi_token_labels_and_fast_path_off_fall_back_exactly(tiny32, mixed_prompts):
    with prefix_reuse(tiny32, False), keys_run(tiny32) as keys:
        assert np.array_equal(tiny32.relative_continuation_logprobs(mixed_prompts, LABELS),
                              tiny32.continuation_logprobs(mixed_prompts, LABELS))
        tiny32.single_token_fast_path = False
        try:
            assert np.array_equal(tiny32.relative_continuation_logprobs(mixed_prompts, SINGLE),
                                  tiny32.continuation_logprobs(mixed_prompts, SINGLE))
        finally:
            tiny32.single_token_fast_path = True
    assert keys == ["cont"] * 4
    # the edge cases continuation_logprobs answers without the model
    assert tiny32.relative_continuation_logprobs([], SINGLE).shape == (0, 4)
    assert tiny32.relative_continuation_logprobs(["Hi"], [""]).tolist() == [[0.0]]
    with pytest.raises(TypeError):
        tiny32.relative_continuation_logprobs(["Hi"], " World")


def test_no_vocabulary_wide_tensor_on_the_label_path(tiny32, mixed_prompts):
    """The full LM head (or its log-softmax) would return a (.., 49152) tensor: the label path returns
    none wider than the model's own layers (hidden 64, MLP 128, ~60 positions); the full-vocabulary
    path (the check's control) does."""
    with WidestOutput() as full:
        tiny32.continuation_logprobs(mixed_prompts, SINGLE)
    assert full.widest == tiny32.vocab_size
    with WidestOutput() as rel:
        tiny32.relative_continuation_logprobs(mixed_prompts, SINGLE)
    assert 0 < rel.widest <= 2 * tiny32.model.config.intermediate_size


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_head_bias_and_logit_softcap_are_applied_as_the_full_head_applies_them(lm, mixed_prompts, dtype):
    """A head with a bias and a softcap that matters (weights of std 1: logits of ~10, softcap 3)."""
    m = tiny(lm, dtype=dtype)
    torch.manual_seed(0)
    head = torch.nn.Linear(m.model.config.hidden_size, m.vocab_size, bias=True, dtype=dtype)
    torch.nn.init.normal_(head.weight, std=1.0)
    torch.nn.init.normal_(head.bias, std=3.0)
    m._lm_head = head
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    plain = renormalize(m.continuation_logprobs(mixed_prompts, SINGLE))
    m._softcap = 3.0
    full = renormalize(m.continuation_logprobs(mixed_prompts, SINGLE))
    assert np.abs(full - plain).max() > 1e-2  # the softcap changes the distributions
    np.testing.assert_allclose(renormalize(m.relative_continuation_logprobs(mixed_prompts, SINGLE)), full,
                               rtol=0, atol=tol)
    with torch.no_grad():
        head.bias.zero_()
    assert np.abs(renormalize(m.continuation_logprobs(mixed_prompts, SINGLE)) - full).max() > 1e-2  # the bias too


def test_score_labels_and_rnm_take_the_label_path(tiny32, mixed_prompts):
    """``score_labels`` (and so every classification mechanism) uses the label rows: the same
    distributions as from full log-probabilities, and no vocabulary-wide tensor."""
    from app.icl import load_bundled
    from app.mechanisms import get_mechanism

    with prefix_reuse(tiny32, False):
        want = renormalize(tiny32.continuation_logprobs(mixed_prompts, SINGLE))
        with WidestOutput() as w:
            sc = score_labels(tiny32, mixed_prompts, [s.strip() for s in SINGLE])
    assert 0 < w.widest <= 2 * tiny32.model.config.intermediate_size
    np.testing.assert_allclose(sc.probs, want, rtol=0, atol=1e-5)
    np.testing.assert_allclose(sc.uncalibrated, want, rtol=0, atol=1e-5)
    task = load_bundled()
    with WidestOutput() as w:
        get_mechanism("rnm").classify(tiny32, task.exemplars()[:4], task.test[0].input, task.labels,
                                      task.template, {"epsilon": 2.0}, np.random.default_rng(0))
    assert 0 < w.widest <= 2 * tiny32.model.config.intermediate_size
