import numpy as np
import pytest

from app.icl.baselines import icl, icl_batch, zero_shot, zero_shot_batch
from app.icl.scoring import (
    CONTENT_FREE_INPUTS,
    ICLPrompt,
    contextual_calibration,
    label_distribution,
    partition_label_distribution,
    renormalize,
    score_labels,
)
from app.icl.templates import ASSISTANT_INTENTS, ICLINF_AGNEWS
from tests.icl.fakes import FakeLM, _unit

LABELS = ("World", "Sports", "Business", "Technology")
EX = [("Stocks rally", "Business"), ("Cup final tonight", "Sports"), ("New phone chip", "Technology"),
      ("Summit in Geneva", "World")]


def test_rows_sum_to_one_and_match_renormalised_logprobs():
    lm = FakeLM()
    prompts = [ICLPrompt.of(EX[:2], "q1"), ICLPrompt.of(EX[2:], "q2"), ICLPrompt.of([], "q3")]
    sc = score_labels(lm, prompts, LABELS, template=ICLINF_AGNEWS)
    assert sc.probs.shape == (3, 4)
    np.testing.assert_allclose(sc.probs.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(sc.probs > 0)
    # p_k = exp(l_k) / sum_j exp(l_j) over the label continuations " World", ...
    expect = np.array([[lm.logprob(s, " " + lab) for lab in LABELS] for s in sc.prompts])
    np.testing.assert_allclose(sc.logprobs, expect)
    np.testing.assert_allclose(sc.probs, np.exp(expect) / np.exp(expect).sum(1, keepdims=True), rtol=1e-12)
    assert sc.content_free is None and np.array_equal(sc.probs, sc.uncalibrated)


class RelativeFakeLM(FakeLM):
    """FakeLM with ``relative_continuation_logprobs``: its log-probs plus a per-prompt constant."""

    def __init__(self) -> None:
        super().__init__()
        self.relative_calls = 0

    def relative_continuation_logprobs(self, prompts, continuations):
        self.relative_calls += 1
        lp = FakeLM().continuation_logprobs(prompts, continuations)
        return lp + np.array([[37.0 * _unit(p)] for p in prompts])


class Delegating:
    """A wrapper that overrides continuation_logprobs only and forwards the rest (tests/mechanisms' CountingLM)."""

    def __init__(self, lm) -> None:
        self._lm = lm
        self.calls = 0

    def continuation_logprobs(self, prompts, continuations):
        self.calls += 1
        return self._lm.continuation_logprobs(prompts, continuations)

    def __getattr__(self, name):
        return getattr(self._lm, name)


def test_relative_scores_when_the_model_has_them_same_distributions():
    prompts = [ICLPrompt.of(EX[:2], "q1"), ICLPrompt.of(EX[2:], "q2")]
    want = score_labels(FakeLM(), prompts, LABELS, template=ICLINF_AGNEWS, calibrate=True)
    lm = RelativeFakeLM()
    got = score_labels(lm, prompts, LABELS, template=ICLINF_AGNEWS, calibrate=True)
    assert lm.relative_calls == 1 and lm.calls == []
    for name in ("probs", "uncalibrated", "content_free"):
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=0, atol=1e-12)
    shift = got.logprobs - want.logprobs  # log-probs up to a constant per row
    assert np.ptp(shift, axis=1).max() < 1e-9 and np.abs(shift).min() > 1e-3
    # a delegating wrapper that knows only continuation_logprobs keeps seeing every call
    wrapped = Delegating(RelativeFakeLM())
    again = score_labels(wrapped, prompts, LABELS, template=ICLINF_AGNEWS, calibrate=True)
    assert wrapped.calls == 1 and wrapped._lm.relative_calls == 0
    np.testing.assert_allclose(again.logprobs, want.logprobs, rtol=0, atol=0)


def test_renormalize_is_stable_for_very_negative_logprobs():
    p = renormalize(np.array([[-1000.0, -1001.0, -1e4]]))
    np.testing.assert_allclose(p.sum(), 1.0)
    np.testing.assert_allclose(p[0, 0] / p[0, 1], np.e)


def test_one_batched_model_call_with_deduplicated_content_free_prompts():
    lm = FakeLM()
    # 5 queries with the same demonstrations: 5 query prompts + 3 shared content-free prompts
    prompts = [ICLPrompt.of(EX, f"query {i}") for i in range(5)]
    label_distribution(lm, prompts, LABELS, calibrate=True, template=ICLINF_AGNEWS)
    assert len(lm.calls) == 1
    sent, conts = lm.calls[0]
    assert conts == [" World", " Sports", " Business", " Technology"]
    assert len(sent) == 5 + len(CONTENT_FREE_INPUTS)
    assert sum(s.endswith("Article: N/A\nAnswer:") for s in sent) == 1
    assert sum(s.endswith("Article: [MASK]\nAnswer:") for s in sent) == 1
    assert sum(s.endswith("Article: \nAnswer:") for s in sent) == 1


def test_calibration_formula_iclinf_appendix_b():
    lm = FakeLM()
    prompt = ICLPrompt.of(EX[:3], "Oil prices jump")
    sc = score_labels(lm, [prompt], LABELS, template=ICLINF_AGNEWS, calibrate=True, eps=1e-3)
    # p_cf: renormalised distributions of the three content-free twins, averaged and renormalised
    cf = []
    for c in CONTENT_FREE_INPUTS:
        s = ICLINF_AGNEWS.render_raw(EX[:3], c)
        cf.append(renormalize(np.array([lm.logprob(s, " " + lab) for lab in LABELS])))
    p_cf = np.mean(cf, axis=0)
    p_cf /= p_cf.sum()
    np.testing.assert_allclose(sc.content_free[0], p_cf, rtol=1e-12)
    # W = diag((p_cf + eps)^-1); calibrated = W p, renormalised
    w = sc.uncalibrated[0] / (p_cf + 1e-3)
    np.testing.assert_allclose(sc.probs[0], w / w.sum(), rtol=1e-12)
    np.testing.assert_allclose(sc.probs.sum(), 1.0)
    assert not np.allclose(sc.probs, sc.uncalibrated)


def test_calibration_removes_a_shared_label_bias():
    # A bias b_k added to every log p(label k | prompt) multiplies every p_k
    # (query and content-free alike) by e^{b_k}; W = diag(1/p_cf) divides it out.
    prompts = [ICLPrompt.of(EX[:2], f"headline {i}") for i in range(40)]
    plain = FakeLM()
    biased = FakeLM(bias={" Sports": 6.0})
    raw = label_distribution(biased, prompts, LABELS, template=ICLINF_AGNEWS)
    assert np.mean(raw.argmax(1) == 1) > 0.9  # the bias dominates the argmax
    # Exact with one content-free input (with several, p_cf averages distributions
    # that were renormalised separately, so the factor cancels only approximately).
    kw = dict(calibrate=True, template=ICLINF_AGNEWS, eps=0.0, content_free=("N/A",))
    cal_b = label_distribution(biased, prompts, LABELS, **kw)
    cal_p = label_distribution(plain, prompts, LABELS, **kw)
    np.testing.assert_allclose(cal_b, cal_p, rtol=1e-10)
    cal3 = label_distribution(biased, prompts, LABELS, calibrate=True, template=ICLINF_AGNEWS)
    assert np.mean(cal3.argmax(1) == 1) < 0.6


def test_calibrated_content_free_input_is_uniform():
    # Zhao et al.: the content-free input is mapped to the uniform distribution.
    lm = FakeLM()
    p = label_distribution(lm, [ICLPrompt.of(EX, "N/A")], LABELS, calibrate=True, template=ICLINF_AGNEWS,
                           content_free=("N/A",), eps=0.0)
    np.testing.assert_allclose(p[0], 0.25, rtol=1e-12)
    np.testing.assert_allclose(contextual_calibration(np.array([0.7, 0.3]), np.array([0.5, 0.5]), 0.0), [0.7, 0.3])


def test_rendered_strings_and_errors():
    lm = FakeLM()
    p = label_distribution(lm, ["Answer:"], ["a", "b"])
    assert p.shape == (1, 2)
    with pytest.raises(ValueError, match="calibration needs ICLPrompt"):
        label_distribution(lm, ["Answer:"], ["a", "b"], calibrate=True)
    with pytest.raises(ValueError, match="at least two"):
        label_distribution(lm, ["x"], ["a"])
    with pytest.raises(ValueError, match="distinct"):
        label_distribution(lm, ["x"], ["a", "a"])
    with pytest.raises(TypeError):
        label_distribution(lm, "x", ["a", "b"])
    assert label_distribution(lm, [], ["a", "b"]).shape == (0, 2)


def test_partition_label_distribution_uses_each_partition():
    lm = FakeLM()
    parts = [np.array([2, 0]), np.array([3]), np.array([], dtype=int)]
    p = partition_label_distribution(lm, EX, parts, "q", LABELS, ICLINF_AGNEWS)
    assert p.shape == (3, 4) and len(lm.calls) == 1
    sent = lm.calls[0][0]
    assert sent[0].index("New phone chip") < sent[0].index("Stocks rally")  # partition order kept
    assert "Summit in Geneva" in sent[1] and "Stocks rally" not in sent[1]
    assert "Article: " not in sent[2].replace("Article: q", "")  # empty partition = zero-shot prompt


def test_baselines():
    lm = FakeLM()
    z = zero_shot(lm, "Oil prices jump", LABELS, ICLINF_AGNEWS)
    assert z.prompt.count("Article:") == 1 and z.label == LABELS[int(np.argmax(z.probs))]
    np.testing.assert_allclose(sum(z.distribution.values()), 1.0)
    r = icl(lm, EX, "Oil prices jump", LABELS, ICLINF_AGNEWS, calibrate=True)
    assert r.prompt.count("Article:") == 5 and all(t in r.prompt for t, _ in EX)
    assert r.label_index == int(np.argmax(r.probs)) and not np.allclose(r.probs, r.uncalibrated)
    zs = zero_shot_batch(lm, ["a", "b"], LABELS, "iclinf-agnews")
    ib = icl_batch(lm, [EX[:1], EX[1:]], ["a", "b"], LABELS, ASSISTANT_INTENTS)
    assert len(zs) == len(ib) == 2
    with pytest.raises(ValueError):
        icl_batch(lm, [EX], ["a", "b"], LABELS)
