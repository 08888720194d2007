"""White-box esa power against noisy alternatives (issue 28 item 2): the observed noise test.

A white-box esa run observes the noisy mean m~ and the clean mean m of every answer, so its noise
m~ - m (``esa.aggregate``: N(0, sigma^2 I)) is tested against the claimed sigma
(``gen_targets.generation_conformance`` -> ``conformance.noise_conformance``). The power of its
chi-square scale test against noise x f is exact (``conformance.conformance_power``), checked here
against the mechanism's own ``aggregate`` with fixed seeds; the plan and the verdict use it for
noise_half / noise_quarter / noise_tenth in place of the black-box lower bound.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from app.audit import Canary, CampaignConfig, run_campaign
from app.audit.conformance import conformance_confidence, conformance_power, noise_conformance
from app.audit.gen_power import gen_design_power
from app.audit.gen_targets import GenerationMechanismTarget
from app.audit.noise import VotingNoise
from app.mechanisms import esa
from tests.audit.test_gen_power import CANARY, EX, TEMPLATE, _design, esa_target
from tests.audit.test_gen_power_ksa import _cp


@pytest.mark.parametrize("trials,mult", [(2, 0.5), (2, 1.0), (6, 0.75), (1, 0.25)])
def test_scale_test_power_is_exact_against_esa_noise(trials, mult):
    """3000 fixed-seed white-box audits of ``trials`` answers (8-dim embeddings) whose noise is the
    mechanism's own ``aggregate`` at sigma x mult: the scale test's rejection count lies in the
    99.99% Clopper-Pearson interval around the closed form, and the whole conformance test
    (scale, KS, zeros) rejects at least as often (up to the same interval)."""
    rng = np.random.default_rng(2833)
    emb = rng.normal(size=(4, 8))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    sigma = 0.7
    conf_c = conformance_confidence(0.95)
    claimed = VotingNoise("gaussian", sigma, 2.0, 1e-5)
    n = 3000
    scale_rejects = any_rejects = 0
    for _ in range(n):
        clean, noisy = esa.aggregate(emb, 1.0, sigma * mult, rng, size=trials)
        c = noise_conformance(np.tile(clean, (trials, 1)), noisy, None, claimed, confidence=conf_c)
        scale_rejects += int(c.scale_p_value is not None and c.scale_p_value < c.alpha / 2)
        any_rejects += int(not c.conformant)
    want = conformance_power("gaussian", trials * 8, mult, confidence=conf_c)
    lo, hi = _cp(scale_rejects, n, 0.9999)
    assert lo <= want <= hi, (trials, mult, scale_rejects / n, want)
    assert any_rejects >= scale_rejects and _cp(any_rejects, n, 0.9999)[1] >= want
    if mult == 1.0:  # a correct mechanism: the scale test's level, and the whole test within 1 - conf_c
        assert want == pytest.approx((1 - conf_c) / 2, rel=1e-9) and _cp(any_rejects, n, 0.9999)[0] <= 1 - conf_c


def test_white_box_power_uses_the_noise_test_for_noisy_alternatives():
    """With the noise draws observed, noise_half / quarter / tenth get the scale test's exact power
    (trials x dims draws) and no_noise 1 (zero residuals); black-box-only designs keep none."""
    d = _design("esa", {"epsilon": 2.0, "delta": 1e-5, "partitions": 4}, white_box=True, noise_dims=384)
    r = gen_design_power(d, trials=40, claimed_epsilon=2.0, confidence=0.95, threat_models=("black-box", "white-box"),
                         delta=1e-5)
    conf_c = conformance_confidence(0.95)
    for name, mult in (("noise_half", 0.5), ("noise_quarter", 0.25), ("noise_tenth", 0.1)):
        a = r.alternatives[name]
        assert a.detection_conformance == conformance_power("gaussian", 40 * 384, mult, confidence=conf_c)
        assert a.detection == max(a.detection_bound, a.detection_conformance) and a.detection > 0.999
    assert r.alternatives["no_noise"].detection_conformance == 1.0
    assert r.alternatives["claimed"].detection_conformance == pytest.approx(1 - conf_c)
    # the non-private release has no noise: its internals (trusted, as for every white-box test) show a
    # zero residual, or there are none and no white-box verdict can pass (as gen_noise's evidence treats it)
    assert r.alternatives["non_private"].detection_conformance == 1.0
    bb = gen_design_power(_design("esa", {"epsilon": 2.0, "delta": 1e-5, "partitions": 4}, white_box=True),
                          trials=40, claimed_epsilon=2.0, confidence=0.95, threat_models=("black-box", "white-box"),
                          delta=1e-5)
    assert bb.alternatives["noise_tenth"].detection_conformance is None  # no draws observed: the lower bound


def test_white_box_campaign_tests_the_observed_noise():
    """A real white-box campaign against the in-process esa target runs the conformance on its
    trials x 8 noise draws and a correct mechanism conforms; one whose noise is a quarter of the
    claimed sigma is a violation in the job's own verdict."""
    tgt = esa_target(4)
    res = run_campaign(tgt, EX, Canary("false_fact", CANARY, CANARY), "signal_text", task_labels=[],
                       template=TEMPLATE, config=CampaignConfig(trials=20), rng=np.random.default_rng(3))
    c = res.conformance
    assert c is not None and c.calls == 20 and c.residuals == 160 and c.conformant, c.findings
    assert c.claimed_scale == pytest.approx(tgt.claimed_sigma(len(EX)))
    bb = run_campaign(tgt, EX, Canary("false_fact", CANARY, CANARY), "signal_text", task_labels=[],
                      template=TEMPLATE, config=CampaignConfig(trials=6, threat_models=("black-box",)),
                      rng=np.random.default_rng(3))
    assert bb.conformance is None
    # a mis-calibrated esa (noise at a quarter of the claimed sigma) is a violation in the job's verdict
    from app.jobs.kinds.canary_gen import generation_power
    from app.jobs.kinds.canary_mia import CanaryMIAConfig, CanaryMIAKind

    bad = QuarterNoiseESA(tgt.lm, tgt.embedder, "esa", tgt.params, TEMPLATE, max_tokens=8)
    res = run_campaign(bad, EX, Canary("false_fact", CANARY, CANARY), "signal_text", task_labels=[],
                       template=TEMPLATE, config=CampaignConfig(trials=20), rng=np.random.default_rng(3))
    assert not res.conformance.conformant and "noise scale x0.2" in res.conformance.findings[0]
    config = CanaryMIAConfig.model_validate({"task": "generation"})
    result = {**res.to_dict(), **generation_power(res, bad, len(EX), 2.0, config)}
    assert CanaryMIAKind().verdict(result, 2.0, None) == "violation"
    assert result["verdict_reason"].startswith("implementation does not match its claim: noise scale")


class QuarterNoiseESA(GenerationMechanismTarget):
    """A broken esa: it reports (and releases from) noise at a quarter of the claimed sigma."""

    def observe(self, context, attack, rng):
        o = super().observe(context, attack, rng)
        return dataclasses.replace(o, noisy_vector=o.clean_vector + (o.noisy_vector - o.clean_vector) / 4)
