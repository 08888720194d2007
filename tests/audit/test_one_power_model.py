"""One power model (issue 28): the planner's predicted detection is the power the verdict reports.

Each design of a seeded sample of the grid (partitions 1-8, labels 2-5, shots, claims, trials,
threat models) runs as a real campaign (``run_campaign``) against a target that reports no clean
votes (the verdict then uses the assumed vote model, as for a black-box gateway), and
``assess_power`` of that campaign -- what the job reports with its verdict -- must equal
``design_power`` -- what the planner predicts -- to the float.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from app.audit import Canary, CampaignConfig, run_campaign
from app.audit.campaign import assess_power
from app.audit.noise import rnm_noise
from app.audit.planner import plan_audit, plan_black_box
from app.audit.power import ALTERNATIVES, design_power
from app.audit.targets import Observation, SimulatedVotingTarget

ALTS = [a for a in ALTERNATIVES if a != "claimed"]


class BlindGateway(SimulatedVotingTarget):
    """A simulated rnm gateway that reports the release (and, white-box, its noisy scores) but never
    its clean votes, like a remote gateway; ``partitions`` and ``mechanism`` as a gateway's."""

    mechanism = "rnm"

    def __init__(self, vw, vo, noise, parts: int, white_box: bool) -> None:
        super().__init__(vw, vo, noise)
        self._parts = parts
        self.white_box = white_box

    @property
    def partitions(self) -> int:
        return self._parts

    def observe(self, context, attack, rng):
        o = super().observe(context, attack, rng)
        return Observation(o.label, o.noisy_scores if self.white_box else None, None, o.epsilon, o.delta)


def _grid(n: int, seed: int = 28):
    full = list(itertools.product(range(1, 9), range(2, 6), (1, 2), (0.5, 1.0, 2.0, 4.0), (10, 41, 200, 1000),
                                  ("black-box", "both")))
    rng = np.random.default_rng(seed)
    return [full[i] for i in rng.choice(len(full), size=n, replace=False)]


@pytest.mark.parametrize("parts,labels,shots,claim,trials,tm", _grid(24))
def test_plan_prediction_equals_verdict_power(parts, labels, shots, claim, trials, tm):
    names = [f"l{i}" for i in range(labels)]
    n = parts * shots
    noise = rnm_noise({"epsilon": claim, "delta": 1e-5, "partitions": parts, "shots_per_partition": shots}, n)
    # the canary's label is the last task label: its index differs from the planner's 0
    pos, neg = labels - 1, 0
    vw, vo = np.zeros(labels), np.zeros(labels)
    vw[pos], vw[neg] = 1, parts - 1
    vo[neg] = parts
    target = BlindGateway(vw, vo, noise, parts, white_box=tm == "both")
    ex = [(f"text {i}", names[0]) for i in range(n)]
    tms = ("black-box", "white-box") if tm == "both" else ("black-box",)
    res = run_campaign(target, ex, Canary("hex", "00ff00ff00ff", names[-1]), "input_output", task_labels=names,
                       config=CampaignConfig(trials=trials, threat_models=tms), rng=np.random.default_rng(1))
    assert len(res.attack.labels) == labels
    verdict = assess_power(res, target, n, claim, required=ALTS, min_detection=0.9)
    plan = design_power(noise, labels=labels, partitions=parts, trials=trials, claimed_epsilon=claim,
                        confidence=0.95, threat_models=len(tms), delta=1e-5, floor=True, required=ALTS,
                        min_detection=0.9)
    assert verdict is not None and verdict.vote_model == "assumed"
    assert plan.ceiling_epsilon == verdict.ceiling_epsilon
    for a in ALTERNATIVES:
        assert plan.alternatives[a].detection == verdict.alternatives[a].detection, a
    assert plan.sufficient == verdict.sufficient and plan.reasons == verdict.reasons


def test_tie_breaking_worst_case_is_the_same_on_both_sides():
    """Two partitions, three labels: the canary's vote ties the other one. A noise-free argmax that
    breaks the tie for the canary detects no_noise with certainty by the bound, one that breaks it
    against never: both the planner and the verdict take the worse (0), wherever the query put the
    labels. The release floor over the three labels does see it: the third label is never released."""
    noise = rnm_noise({"epsilon": 2.0, "delta": 1e-5, "partitions": 2, "shots_per_partition": 4}, 8)
    rep = design_power(noise, labels=3, partitions=2, trials=2000, claimed_epsilon=2.0, confidence=0.95,
                       threat_models=1, delta=1e-5, floor=False, required=["no_noise"])
    assert rep.alternatives["no_noise"].detection == 0.0 and not rep.sufficient
    d = plan_black_box(noise, labels=3, partitions=2, claimed_epsilon=2.0, confidence=0.95, delta=1e-5,
                       alternatives=["no_noise"], max_trials=4000, floor=False)
    assert d.trials is None
    with_floor = design_power(noise, labels=3, partitions=2, trials=200, claimed_epsilon=2.0, confidence=0.95,
                              threat_models=1, delta=1e-5, floor=True, required=["no_noise"])
    assert with_floor.alternatives["no_noise"].detection_bound == 0.0
    assert with_floor.alternatives["no_noise"].detection_floor == 1.0


def _noise_2(t, s):
    return rnm_noise({"epsilon": 2.0, "delta": 1e-5, "partitions": t, "shots_per_partition": s}, t * s)


def test_issue_repro_recommends_a_design_that_runs_and_decides():
    """The issue's request: remote black-box rnm, 2 partitions x 4 shots, 3 labels, dataset.size 8,
    claim 2, noise_quarter and no_noise. Before the release floor covered more than two labels no
    one-canary black-box design decided (the no-noise argmax never changes at T >= 2); over three
    labels the floor sees a label that is never released. The recommended design fits the dataset,
    and run as a campaign its verdict passes the claimed noise and finds no noise and sigma/4."""
    from app.jobs.kinds.canary_mia import CanaryMIAKind

    out = plan_audit(_noise_2, labels=3, exemplars=8, partitions=2, shots_per_partition=4, claimed_epsilon=2.0,
                     confidence=0.95, delta=1e-5, alternatives=["noise_quarter", "no_noise"], white_box=False,
                     max_trials=20_000)
    rec = out["recommended"]
    assert rec is not None and rec["threat_model"] == "black-box" and rec["partitions"] * rec["shots_per_partition"] <= 8
    for d in out["designs"]:
        assert d["partitions"] * (d["shots_per_partition"] or 1) <= 8
    t, shots, trials = rec["partitions"], rec["shots_per_partition"], rec["trials"]
    names = ["l0", "l1", "l2"]
    vw, vo = np.zeros(3), np.zeros(3)
    vw[2], vw[0] = 1, t - 1
    vo[0] = t
    verdicts = {}
    for bug in (None, {"noise_multiplier": 0.25}, {"noise_multiplier": 1e-12}):
        noise = _noise_2(t, shots)
        target = BlindGateway(vw, vo, noise.with_bug(bug), t, white_box=False)
        ex = [(f"text {i}", names[0]) for i in range(t * shots)]
        res = run_campaign(target, ex, Canary("hex", "00ff00ff00ff", names[-1]), "input_output", task_labels=names,
                           config=CampaignConfig(trials=trials, threat_models=("black-box",)),
                           rng=np.random.default_rng(5))
        body = res.to_dict()
        rep = assess_power(res, target, t * shots, 2.0, required=["noise_quarter", "no_noise"], min_detection=0.9)
        body["power"] = None if rep is None else rep.to_dict()
        verdicts[str(bug)] = CanaryMIAKind().verdict(body, 2.0, None)
    assert verdicts == {"None": "pass", str({"noise_multiplier": 0.25}): "violation",
                        str({"noise_multiplier": 1e-12}): "violation"}, verdicts
    # with the gateway's internals the same request has a cheaper recommendation: white-box
    out_wb = plan_audit(_noise_2, labels=3, exemplars=8, partitions=2, shots_per_partition=4, claimed_epsilon=2.0,
                        confidence=0.95, delta=1e-5, alternatives=["noise_quarter", "no_noise"], white_box=True,
                        max_trials=20_000)
    assert out_wb["recommended"]["threat_model"] == "white-box"


def test_no_black_box_design_within_the_cap_gives_the_advice_with_numbers():
    """Where no one-canary black-box design decides within max_trials, nothing black-box is
    recommended and the notes give white-box and the canary-per-partition design with their numbers."""
    out = plan_audit(_noise_2, labels=2, exemplars=8, partitions=2, shots_per_partition=4, claimed_epsilon=2.0,
                     confidence=0.95, delta=1e-5, alternatives=["noise_quarter", "no_noise"], white_box=False,
                     max_trials=20)
    assert out["recommended"] is None
    for d in out["designs"]:
        if d["runnable"] and d["trials"] is not None:
            pytest.fail(f"a runnable design was proposed: {d}")
    wb = [d for d in out["designs"] if d["threat_model"] == "white-box"]
    assert wb and wb[0]["trials"] and wb[0]["requires"].startswith("target.white_box")
    assert "white-box noise conformance does with" in out["notes"][-1]


def test_recommended_design_fits_the_dataset_and_its_verdict_can_pass():
    """Two labels (the release floor applies): a design is recommended, it fits dataset.size, and
    the verdict's power for it is sufficient -- including the ceiling above the claim."""
    def noise_for(t, s):
        return rnm_noise({"epsilon": 2.0, "delta": 1e-5, "partitions": t, "shots_per_partition": s}, t * s)

    out = plan_audit(noise_for, labels=2, exemplars=8, partitions=2, shots_per_partition=4, claimed_epsilon=2.0,
                     confidence=0.95, delta=1e-5, alternatives=["noise_quarter", "no_noise"], max_trials=20_000)
    rec = out["recommended"]
    assert rec is not None and rec["partitions"] * rec["shots_per_partition"] <= 8
    rep = design_power(noise_for(rec["partitions"], rec["shots_per_partition"]), labels=2,
                       partitions=rec["partitions"], trials=rec["trials"], claimed_epsilon=2.0, confidence=0.95,
                       threat_models=1, delta=1e-5, floor=True, required=["noise_quarter", "no_noise"])
    assert rep.sufficient
    assert {k: rep.alternatives[k].detection for k in rec["detection"]} == rec["detection"]
