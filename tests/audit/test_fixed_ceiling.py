"""The fixed design's black-box pass needs a bound that can refute the claim (issue 28): a non-private
gateway (plain ICL over every exemplar, no noise; tests/audit/standalone_gateway.py) releases each label
half the time, so the release floor never sees it, and only the bound can. Before, a design whose floor
detected every noise alternative was recommended and passed with its ceiling below the claim (5 x 2 at
claim 2: 40 trials, ceiling 1.60): the non-private gateway passed it, 3 of 3 audits."""

from __future__ import annotations

import numpy as np

from app.audit import Canary, CampaignConfig, RemoteTarget, resolve_query, rnm_noise, run_campaign
from app.audit.campaign import assess_power
from app.audit.planner import plan_audit
from app.jobs.kinds.canary_mia import CanaryMIAKind
from tests.audit.standalone_gateway import StandaloneGateway

N = 12
EXEMPLARS = [(f"play some music number {i}", "music") for i in range(N)]
CANARY = Canary("hex", "00ff00ff00ff00ff", "weather")
ALTS = ["noise_quarter", "no_noise"]


def _params(eps: float, t: int, shots: int) -> dict:
    return {"epsilon": eps, "delta": 1e-5, "partitions": t, "shots_per_partition": shots}


def _plan(eps: float) -> dict:
    return plan_audit(lambda t, s: rnm_noise(_params(eps, t, s), N), labels=2, exemplars=N, partitions=4,
                      shots_per_partition=3, claimed_epsilon=eps, confidence=0.95, delta=1e-5, alternatives=ALTS,
                      threat_models=1, floor=True, white_box=False)["recommended"]


def test_the_recommended_fixed_design_refutes_a_non_private_gateway():
    eps = 2.0
    rec = _plan(eps)
    assert rec["ceiling_epsilon"] > eps and not rec["reasons"], rec
    attack = resolve_query("input_output", CANARY, ["weather", "music"], EXEMPLARS, None)
    with StandaloneGateway("non_private", seed=4) as gw:
        target = RemoteTarget(gw.url, "rnm", _params(eps, rec["partitions"], rec["shots_per_partition"]), {})
        try:
            res = run_campaign(target, EXEMPLARS, CANARY, "input_output", task_labels=["weather", "music"],
                               config=CampaignConfig(trials=rec["trials"], threat_models=("black-box",)),
                               rng=np.random.default_rng(0))
        finally:
            target.close()
    out = res.to_dict()
    rep = assess_power(res, target, N, eps, required=ALTS, min_detection=0.9)
    out["power"] = None if rep is None else rep.to_dict()
    assert attack.positive == "weather"
    assert str(CanaryMIAKind().verdict(out, eps, None)) == "violation", out.get("verdict_reason")

