"""The design-model check a black-box generation pass rests on (``app.audit.gen_model_check``), in the
fixed audit's verdict and its planner: a target whose model does not follow the signal query cannot
pass on the design model's predicted power (SmolLM2 made broken mozo / esa targets pass before)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from app.audit import Canary, CampaignConfig, run_campaign
from app.audit.gen_model_check import MODEL_CHECK_DELTA, Z_BLOCK, fixed_model_check, pairs_needed
from app.audit.gen_power import alternative_release, assess_generation_power, gen_design_power
from app.audit.gen_sequential import DesignModelCheck
from app.audit.gen_targets import GenerationMechanismTarget
from tests.audit.test_gen_power import CANARY, EX, TEMPLATE, Y0, Y1, SignalEmbedder, SignalLM, _design


class IgnoringLM(SignalLM):
    """Answers y1 whatever the context holds (SmolLM2 does so 40-100% of the time without the canary)."""

    name = "ignoring-lm"

    def generate(self, prompts, max_new_tokens=8, temperature=0.0, stop=None, seed=None, top_p=None, **kw):
        return [SimpleNamespace(text=Y1, finish_reason="stop", token_ids=[1, 2, 3]) for _ in prompts]


def _esa(lm, eps=2.0):
    return GenerationMechanismTarget(lm, SignalEmbedder(), "esa",
                                     {"epsilon": eps, "delta": 1e-5, "partitions": 1, "candidates": 2},
                                     TEMPLATE, max_tokens=8)


def _config(req):
    from app.jobs.kinds.canary_mia import CanaryMIAConfig

    return CanaryMIAConfig.model_validate({"task": "generation", "threat_model": "black-box",
                                           "power": {"alternatives": req}})


def test_pairs_needed_is_walds_bound_of_the_worst_shift():
    law = (0.8, 0.3)
    kl = [stats.entropy([m + d, 1 - m - d], [m, 1 - m]) for m in law for d in (0.25, -0.25) if 0 <= m + d <= 1]
    assert pairs_needed(law, 0.05) == math.ceil(math.log(4 / 0.05) / min(kl))
    assert pairs_needed(law, 0.01) > pairs_needed(law, 0.05)
    assert DesignModelCheck(_design("esa", {"epsilon": 2.0, "delta": 1e-5, "partitions": 1})).pairs_needed(0.05) == \
        pairs_needed(alternative_release(_design("esa", {"epsilon": 2.0, "delta": 1e-5, "partitions": 1}), "claimed"),
                     0.05)


def _p_fit(true: float, law: float, n: int) -> float:
    """Exact P(|K/n - law| <= Z_BLOCK se(law)) for K ~ Bin(n, true)."""
    se = math.sqrt(law * (1 - law) / n)
    k = np.arange(n + 1)
    return float(stats.binom.pmf(k, n, true)[np.abs(k / n - law) <= Z_BLOCK * se].sum())


def _rows(a: int, b: int, n: int) -> list[dict]:
    return ([{"member": True, "released": Y1}] * a + [{"member": True, "released": Y0}] * (n - a)
            + [{"member": False, "released": Y1}] * b + [{"member": False, "released": Y0}] * (n - b))


@pytest.mark.parametrize("law,n", [((0.8, 0.3), 40), ((0.95, 0.1), 70)])
def test_fits_turns_away_at_the_exact_binomial_rate(law, n):
    """Releases drawn from the claimed law, then with one share shifted by MODEL_CHECK_DELTA at the
    planner's pairs: the share of audits ``fits`` turns away equals the exact binomial probability
    (scipy), within 3 binomial sd over the simulated audits."""
    rng = np.random.default_rng(3)
    need = pairs_needed(law, 0.05)
    shifted = (law[0], law[1] + MODEL_CHECK_DELTA)
    for true, m, reps in ((law, n, 4000), (shifted, need, 2000)):
        exact = 1.0 - _p_fit(true[0], law[0], m) * _p_fit(true[1], law[1], m)
        k = rng.binomial(m, true, (reps, 2))
        away = sum(not fixed_model_check(law, _rows(int(a), int(b), m), Y1, 0.05).fits for a, b in k)
        assert abs(away - reps * exact) <= 3 * math.sqrt(reps * exact * (1 - exact)), (true, away, reps * exact)
    # a target on the law is rarely turned away; one 0.25 off at the planner's pairs mostly is
    assert 1.0 - _p_fit(law[0], law[0], n) * _p_fit(law[1], law[1], n) < 0.15
    assert 1.0 - _p_fit(shifted[0], law[0], need) * _p_fit(shifted[1], law[1], need) > 0.6


def test_the_planner_adds_the_trials_the_check_needs():
    d = _design("esa", {"epsilon": 2.0, "delta": 1e-5, "partitions": 1})
    need = pairs_needed(alternative_release(d, "claimed"), 0.05)
    kw = dict(claimed_epsilon=2.0, confidence=0.95, threat_models=("black-box",), delta=1e-5,
              required=("no_noise", "non_private"))
    short = gen_design_power(d, trials=2 * need - 2, **kw)
    assert any("rests on the design model" in r for r in short.reasons) and not short.sufficient
    assert short.design["model_check_pairs_needed"] == need
    assert not any("rests on the design model" in r for r in gen_design_power(d, trials=2 * need, **kw).reasons)


def test_a_target_that_ignores_the_canary_is_not_a_pass_on_predicted_power():
    """esa with one partition over a model that answers y1 whatever the context: the design model's
    power is sufficient (it would have passed before the check), the releases refute its claimed law,
    so the verdict is inconclusive, says why, and advises no trial count."""
    from app.jobs.kinds.canary_gen import generation_power
    from app.jobs.kinds.canary_mia import CanaryMIAKind

    req = ["no_noise", "non_private"]
    tgt = _esa(IgnoringLM())
    res = run_campaign(tgt, EX, Canary("false_fact", CANARY, CANARY), "signal_text", task_labels=[],
                       template=TEMPLATE, config=CampaignConfig(trials=200, threat_models=("black-box",)),
                       rng=np.random.default_rng(11))
    assert assess_generation_power(res, tgt, len(EX), 2.0, required=req).sufficient  # the model's prediction
    result = {**res.to_dict(), **generation_power(res, tgt, len(EX), 2.0, _config(req))}
    assert CanaryMIAKind().verdict(result, 2.0, None) == "inconclusive", result["verdict_reason"]
    mc = result["power"]["design"]["model_check"]
    assert mc["enough"] and not mc["fits"] and mc["y1_without"] > mc["law"][1] * mc["nonmembers"] + 10
    assert result["verdict_reason"].startswith("no violation seen, but the power of this audit is unknown")
    assert "does not follow the design model" in result["verdict_reason"]
    assert "no trial count makes this a pass" in result["verdict_reason"]


def test_a_target_that_follows_the_model_still_passes_and_says_so():
    from app.jobs.kinds.canary_gen import generation_power
    from app.jobs.kinds.canary_mia import CanaryMIAKind

    req = ["no_noise", "non_private"]
    tgt = _esa(SignalLM())
    res = run_campaign(tgt, EX, Canary("false_fact", CANARY, CANARY), "signal_text", task_labels=[],
                       template=TEMPLATE, config=CampaignConfig(trials=200, threat_models=("black-box",)),
                       rng=np.random.default_rng(11))
    result = {**res.to_dict(), **generation_power(res, tgt, len(EX), 2.0, _config(req))}
    assert CanaryMIAKind().verdict(result, 2.0, None) == "pass", result["verdict_reason"]
    mc = result["power"]["design"]["model_check"]
    assert mc["fits"] and mc["members"] == mc["nonmembers"] == 100
    assert f"{mc['y1_with']}/100 trials with the canary" in result["verdict_reason"]
