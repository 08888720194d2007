"""PoE under the bootstrap (tight-auditing Algorithm 1): clean "votes" = the pre-sampling scores
lam U (``poe`` internals ``clean_scores``), noise = the mechanism's own Gumbel(0, 1) (``poe_noise``).

No model: a scripted LM decides each expert's label distribution from its one exemplar (the canary
expert says Yes, every other expert says No), so the real ``poe`` code path (experts, clipping,
summing, lam) produces the scores. Closed forms (the exponential mechanism, P(y) ~ exp(lam U(y)))
give the tolerances; seeds are fixed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.audit import CampaignConfig, Canary, MechanismTarget, bootstrap_audit, poe_noise, run_campaign
from app.mechanisms import get_mechanism
from app.mechanisms.aggregate import exponential_mechanism_distribution

CANARY = Canary("hex", "0f1e2d3c4b5a6978", "billing")
EX = [("please send the invoice again", "billing"), ("where is my parcel", "shipping")]
TASK = ["billing", "shipping"]
TEMPLATE = {"instruction": "Classify each message: {labels}.", "input_prefix": "Input: ", "output_prefix": "Label:"}
CLIP = 4.0


class ScriptedLM:
    """continuation_logprobs: an expert whose exemplar is the canary puts all mass on ' Yes', any other
    expert all on ' No' (clipped: a = 0 for its label, -c for the rest). Counts calls."""

    name = "scripted"

    def __init__(self):
        self.calls = 0

    def continuation_logprobs(self, prompts, continuations):
        self.calls += 1
        out = np.full((len(prompts), len(continuations)), -50.0)
        for i, p in enumerate(prompts):
            member = f"Input: {CANARY.text}\nLabel: " in p  # the canary as a demonstration, not the query
            out[i, continuations.index(" Yes" if member else " No")] = 0.0
        return out


def _campaign(eps, bug=None, *, mode="bootstrap", trials=2000, seed=0, threat_models=("black-box", "white-box")):
    lm = ScriptedLM()
    target = MechanismTarget(lm, "poe", {"epsilon": eps, "clip": CLIP}, TEMPLATE, bug=bug)
    cfg = CampaignConfig(mode=mode, trials=trials, n_llm=2, n_sample=400_000, threat_models=threat_models)
    r = run_campaign(target, EX, CANARY, "inquiry", task_labels=TASK, template=TEMPLATE, config=cfg,
                     rng=np.random.default_rng(seed))
    return r, lm


def _closed_form(eps, multiplier=1.0):
    """P(Yes) with and without the canary, and the black-box privacy loss max(log TPR/FPR, log TNR/FNR).
    Replace-one: lam = eps / (2c). C1 = {canary: Yes, other: No}, C0 = {No, No}; labels billing, shipping,
    Yes, No; U = sum of clipped log-probs; the bug divides the Gumbel scale, i.e. multiplies lam."""
    lam = eps / (2 * CLIP) / multiplier
    u1 = np.array([-2 * CLIP, -2 * CLIP, -CLIP, -CLIP])
    u0 = np.array([-2 * CLIP, -2 * CLIP, -2 * CLIP, 0.0])
    p1 = exponential_mechanism_distribution(u1, lam)[2]
    p0 = exponential_mechanism_distribution(u0, lam)[2]
    return p1, p0, max(math.log(p1 / p0), math.log((1 - p0) / (1 - p1)))


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0, 4.0])
def test_poe_bootstrap_is_valid(eps):
    """A correct PoE passes: the rigorous bound stays below the claim (and below the true black-box
    loss of this pair), while being close to that loss: 400,000 draws per hypothesis put the log-ratio's
    standard error at ~0.01, so the 95% bound lies within 6 SE of the closed form."""
    r, lm = _campaign(eps)
    assert lm.calls == 4 and r.model_calls == 4  # 2 x n_llm, one batched call each
    assert r.epsilon_claimed == pytest.approx(eps) and r.violation is False
    bb, wb = r.estimates["black-box"], r.estimates["white-box"]
    _p1, _p0, loss = _closed_form(eps)
    se = math.sqrt(sum((1 - p) / (p * 400_000) for p in (_p1, _p0, 1 - _p1, 1 - _p0)))
    assert bb.epsilon_lower <= loss and bb.epsilon_lower >= loss - 6 * se, (bb.epsilon_lower, loss, se)
    assert wb.epsilon_lower <= eps and not wb.gdp_applicable and not bb.gdp_applicable


def test_poe_lambda_times_four_is_caught():
    """The broken PoE (Gumbel scale 1/4 = lambda x4) claims eps = 1 and is caught by both threat models;
    the same scores with the correct noise pass (test above)."""
    r, _ = _campaign(1.0, bug="noise_quarter")
    p1, p0, loss = _closed_form(1.0, multiplier=0.25)
    assert loss > 3.0  # the true black-box loss of lam x4 on this pair
    assert r.violation is True
    assert r.estimates["black-box"].epsilon_lower > 2.5 and r.estimates["white-box"].epsilon_lower > 2.5


def test_poe_direct_mode_matches_and_catches():
    """Direct mode runs the mechanism (or the broken one) on every trial: correct passes, broken is caught
    (2000 trials: the black-box loss 3.3 of lam x4 gives a bound > 1 at 1000 trials per hypothesis)."""
    ok, _ = _campaign(1.0, mode="direct", seed=3, threat_models=("black-box",))
    bad, _ = _campaign(1.0, bug="noise_quarter", mode="direct", seed=3, threat_models=("black-box",))
    assert ok.violation is False and ok.model_calls == 2000
    assert bad.violation is True and bad.estimates["black-box"].epsilon_lower > 1.5


def test_two_label_bootstrap_matches_the_exponential_mechanism():
    """Exact check: two labels, one clean score vector per hypothesis: the black-box TPR/FPR of the
    bootstrap are the EM probabilities P(Yes) = softmax(lam U)[Yes] within 5 binomial standard errors;
    and the mechanism's own sampler (``poe.sample_labels``) agrees with the same closed form (the audit
    re-applies exactly the deployed noise)."""
    poe = get_mechanism("poe")
    labels = ("Yes", "No")
    params = {"epsilon": 1.5, "clip": CLIP}
    probs_in = np.array([[0.9, 0.1], [0.2, 0.8], [0.4, 0.6]])  # expert label distributions with the canary
    probs_out = np.array([[0.05, 0.95], [0.2, 0.8], [0.4, 0.6]])  # the canary's expert replaced
    res_in = poe.release(probs_in, labels, params, 3, np.random.default_rng(0))
    res_out = poe.release(probs_out, labels, params, 3, np.random.default_rng(0))
    s_in, s_out = res_in.internals["clean_scores"], res_out.internals["clean_scores"]
    lam = res_in.internals["inverse_temperature"]
    np.testing.assert_allclose(s_in, lam * res_in.internals["clipped_utility_sums"])
    p1 = exponential_mechanism_distribution(res_in.internals["clipped_utility_sums"], lam)[0]
    p0 = exponential_mechanism_distribution(res_out.internals["clipped_utility_sums"], lam)[0]
    assert res_in.distribution["Yes"] == pytest.approx(p1)
    n = 400_000
    b = bootstrap_audit([s_in], [s_out], poe_noise(params, 3), 0, 1, rng=np.random.default_rng(7), n_sample=n,
                        threat_models=("black-box",), convergence=False)
    bb = b.estimates["black-box"]
    for got, p in ((bb.tpr, p1), (bb.fpr, p0)):
        assert abs(got - p) <= 5 * math.sqrt(p * (1 - p) / n), (got, p)
    drawn = poe.sample_labels(probs_in, labels, params, 3, np.random.default_rng(8), size=n)
    assert abs(np.mean(drawn == 0) - p1) <= 5 * math.sqrt(p1 * (1 - p1) / n)
    # validity: pure eps-DP, so the bound stays below the claim
    assert bb.epsilon_lower <= 1.5


def test_poe_noise_validates_and_bugs():
    z = poe_noise({"epsilon": 2.0}, 4)
    assert (z.kind, z.scale, z.epsilon, z.delta) == ("gumbel", 1.0, 2.0, 0.0)
    assert poe_noise({"epsilon": 2.0}, 4, "noise_quarter").applied_scale == 0.25
    with pytest.raises(Exception):
        poe_noise({"epsilon": 2.0, "group_size": 5}, 4)  # more than the exemplars
