"""Decoy labels: the release floor over k > 2 labels, and what decoys let a black-box audit see.

The floor (conformance.min_release_probability) is checked against Monte Carlo draws of the claimed
noise itself, over every integer vote split (it must be the least of them); the sequential audit's
k-label floor processes against a correct mechanism at the floor's own boundary (type I), and
winner-only noise, which black-box two-label audits pass, against decoys (simulated and through the
independent HTTP gateway)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from app.audit import RemoteTarget, SimulatedVotingTarget, resolve_query, rnm_noise
from app.audit.conformance import min_release_probability
from app.audit.noise import VotingNoise
from app.audit.queries import with_decoys
from app.audit.sequential import run_sequential
from benchmarks.ci_sequential_compare import CANARY, EXEMPLARS, N, BlackBox, _params
from tests.audit.standalone_gateway import StandaloneGateway

DRAWS = 400_000


def _mc(noise: VotingNoise, votes: list[float], rng: np.random.Generator) -> tuple[float, float]:
    """P(label 0 released | votes) by direct draws of the noise, and its standard error."""
    v = np.tile(np.asarray(votes, dtype=float), (DRAWS, 1))
    p = float((np.argmax(noise.sample(v, rng), axis=1) == 0).mean())
    return p, max(np.sqrt(p * (1 - p) / DRAWS), 1e-4)


@pytest.mark.parametrize("kind", ["gaussian", "laplace", "gumbel"])
@pytest.mark.parametrize("k,t,scale", [(3, 3, 1.0), (4, 2, 1.5), (5, 5, 5.28)])
def test_the_k_label_floor_is_the_least_release_probability_over_every_vote_split(kind, k, t, scale):
    noise = VotingNoise(kind, scale, 1.0, 1e-5)
    floor = min_release_probability(noise, t, k)
    rng = np.random.default_rng(7)
    seen = []
    # label 0 gets v0 votes, the other k - 1 labels share the rest (every split, up to order)
    for v0 in range(t + 1):
        for rest in itertools.combinations_with_replacement(range(t - v0 + 1), k - 1):
            if sum(rest) != t - v0:
                continue
            p, se = _mc(noise, [float(v0), *map(float, rest)], rng)
            assert p >= floor - 5 * se, (v0, rest, p, floor)
            seen.append((p, se, v0, rest))
    p, se, v0, rest = min(seen)
    assert v0 == 0 and sorted(rest)[-1] == t or abs(p - floor) < 5 * se  # the least split: all T on one label
    at, at_se = _mc(noise, [0.0, float(t)] + [0.0] * (k - 2), rng)
    assert abs(at - floor) < 5 * at_se, (at, floor)


def test_the_k_label_floor_reduces_to_the_two_label_closed_forms_and_gumbels_softmax():
    for kind in ("gaussian", "laplace", "gumbel"):
        nz = VotingNoise(kind, 2.0, 1.0, 1e-5)
        assert min_release_probability(nz, 3, 2) == min_release_probability(nz, 3)
    g = VotingNoise("gumbel", 2.0, 1.0, 1e-5)
    for k in (2, 3, 7):
        assert min_release_probability(g, 3, k) == pytest.approx(1.0 / (np.exp(1.5) + k - 1), rel=1e-12)
    assert min_release_probability(g, 10_000, 3) == pytest.approx(0.0, abs=1e-300)  # no overflow
    with pytest.raises(ValueError):
        min_release_probability(g, 3, 1)


def test_decoy_names_never_collide_with_the_task_labels():
    assert with_decoys(["a", "b"], 0) == ["a", "b"]
    assert with_decoys(["a", "b"], 3) == ["a", "b", "a (decoy 1)", "b (decoy 2)", "a (decoy 3)"]
    out = with_decoys(["a", "a (decoy 1)"], 1)
    assert out[:2] == ["a", "a (decoy 1)"] and len(set(out)) == 3 and out[2].startswith("a (decoy 1")
    with pytest.raises(ValueError):
        with_decoys(["a", "b"], ["b"])


def test_a_counted_decoy_extends_its_label_and_never_gets_a_vote(lm):
    """A counted decoy is its label L followed by more text: on the bundled tokenizer its continuation's
    tokens start with L's, so its summed log-prob is below L's and no partition ever votes for it
    (in-process rnm on SmolLM2, the canary contexts of the compare design, 8 partition draws each,
    with and without the canary). A decoy with a name of its own gets votes there (the hex canary's
    partition likes an odd label): the guarantee is the naming's, not the model's."""
    from app.audit import MechanismTarget
    from app.audit.insertion import paired_contexts
    from app.icl.templates import get_template

    tpl = get_template(None)
    tok = lambda s: lm.tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    labels = with_decoys(["weather", "music"], 2)
    for decoy, base in zip(labels[2:], labels[:2]):
        (cd, cb) = tpl.continuations([decoy, base])
        assert tok(cd)[:len(tok(cb))] == tok(cb) and len(tok(cd)) > len(tok(cb)), (decoy, tok(cd), tok(cb))
    seen = {}
    for name in (1, ["decoy 1"]):
        attack = resolve_query("input_output", CANARY, with_decoys(["weather", "music"], name), EXEMPLARS, None)
        c1, c0 = paired_contexts(EXEMPLARS, attack.canary.exemplar(), 0)
        target = MechanismTarget(lm, "rnm", _params(1.0, 5), {})
        votes = np.zeros(3)
        for seed in range(8):
            for c in (c1, c0):
                votes += np.asarray(target.observe(c, attack, np.random.default_rng(seed)).clean_votes)
        seen[attack.labels[2]] = votes
    assert seen["weather (decoy 1)"][2] == 0 and seen["weather (decoy 1)"].sum() == 80, seen
    assert seen["decoy 1"][2] > 0, seen  # SmolLM2 votes for a decoy named on its own (12 of 80 here)


def _attack(decoys: int):
    return resolve_query("input_output", CANARY, with_decoys(["weather", "music"], decoys), EXEMPLARS, None)


def _votes(k: int, with_canary: list[float], without: list[float]) -> tuple[np.ndarray, np.ndarray]:
    vw, vo = np.zeros(k), np.zeros(k)
    vw[:len(with_canary)], vo[:len(without)] = with_canary, without
    return vw, vo


def test_k_label_floor_processes_keep_their_level_at_the_floors_boundary():
    """A correct mechanism whose votes sit at the floor (every partition votes one label, with and
    without the canary: each other label released at exactly the floor) and a spread split: no
    alternatives, so each audit runs to its cap or a false violation. 120 audits at level 0.05: more
    than the 0.999 quantile of Bin(120, 0.05) false violations fails."""
    eps, t, k = 1.0, 5, 5
    attack = _attack(3)
    nz = rnm_noise(_params(eps, t), N)
    limit = int(stats.binom.ppf(0.999, 120, 0.05))
    for w, o in (([0.0, 5.0], [0.0, 5.0]), ([2.0, 2.0, 1.0], [1.0, 3.0, 1.0])):
        vw, vo = _votes(k, w, o)
        false = 0
        for s in range(120):
            r = run_sequential(BlackBox(SimulatedVotingTarget(vw, vo, nz)), EXEMPLARS, attack, claimed_epsilon=eps,
                               delta=1e-5, noise=nz, partitions=t, alternatives=[], alpha=0.05, cap=160,
                               rng=np.random.default_rng(1000 + s))
            false += r.verdict == "violation"
        assert false <= limit, (w, o, false)


@pytest.mark.parametrize("eps,t", [(1.0, 5), (2.0, 3)])
def test_black_box_winner_only_is_a_violation_with_one_decoy_and_a_correct_target_passes(eps, t):
    """Two labels: winner-only noise moves a release rate by a few points and black-box audits pass it
    (docs/audit.md). One decoy label: it is never noised, so never released, and the floor catches it."""
    attack = _attack(1)
    vw, vo = _votes(3, [1.0, t - 1.0], [0.0, float(t)])
    nz = rnm_noise(_params(eps, t), N)
    alts = ["noise_quarter", "no_noise", "winner_only"]
    for s in range(5):
        bad = run_sequential(BlackBox(SimulatedVotingTarget(vw, vo, nz.with_bug("winner_only"))), EXEMPLARS, attack,
                             claimed_epsilon=eps, delta=1e-5, noise=nz, partitions=t, alternatives=alts, alpha=0.05,
                             cap=1000, rng=np.random.default_rng(s))
        assert bad.verdict == "violation", bad.reason
        good = run_sequential(BlackBox(SimulatedVotingTarget(vw, vo, nz)), EXEMPLARS, attack, claimed_epsilon=eps,
                              delta=1e-5, noise=nz, partitions=t, alternatives=alts, alpha=0.05, cap=2000,
                              rng=np.random.default_rng(s))
        assert good.verdict == "pass", good.reason
        assert "winner_only by trial" in good.reason


@pytest.mark.parametrize("mode,verdict", [("winner_only", "violation"), ("correct", "pass")])
def test_the_independent_gateway_with_a_decoy(mode, verdict):
    eps, t = 2.0, 3
    nz = rnm_noise(_params(eps, t), N)
    with StandaloneGateway(mode, seed=101) as gw:
        target = RemoteTarget(gw.url, "rnm", _params(eps, t), {})
        try:
            r = run_sequential(target, EXEMPLARS, _attack(1), claimed_epsilon=eps, delta=1e-5, noise=nz, partitions=t,
                               alternatives=["noise_quarter", "no_noise", "winner_only"], alpha=0.05, cap=2000,
                               rng=np.random.default_rng(1))
        finally:
            target.close()
    assert r.verdict == verdict, r.reason
    if verdict == "violation":
        assert "release_floor" in r.reason


def test_decoy_labels_in_a_canary_config():
    from pydantic import ValidationError

    from app.jobs.kinds.canary_config import CanaryMIAConfig
    from app.jobs.kinds.canary_data import _query_labels

    base = {"target": {"type": "simulated", "params": {"epsilon": 1, "delta": 1e-5, "partitions": 4}},
            "dataset": {"size": 8, "decoy_labels": 2}}
    cfg = CanaryMIAConfig.model_validate(base)
    plain = CanaryMIAConfig.model_validate({**base, "dataset": {"size": 8}})
    assert _query_labels(cfg) == _query_labels(plain) + 2
    with pytest.raises(ValidationError, match="dataset.decoy_labels"):
        CanaryMIAConfig.model_validate({**base, "task": "generation"})
    with pytest.raises(ValidationError):
        CanaryMIAConfig.model_validate({**base, "dataset": {"size": 8, "decoy_labels": 9}})


@pytest.mark.parametrize("bug,expected", [("winner_only", "violation"), (None, "not violation")])
def test_the_fixed_design_runs_the_floor_over_every_label_with_a_decoy(bug, expected):
    """The fixed design (150 trials, the planner's claim-1 design) with one decoy: winner-only noise never
    releases it, so the k-label release floor finds it; a correct target's releases are not flagged."""
    from app.audit import CampaignConfig, run_campaign
    from app.audit.campaign import assess_power
    from app.jobs.kinds.canary_mia import CanaryMIAKind

    eps, t = 1.0, 5
    nz = rnm_noise(_params(eps, t), N).with_bug(bug)
    vw, vo = _votes(3, [1.0, t - 1.0], [0.0, float(t)])
    target = BlackBox(SimulatedVotingTarget(vw, vo, nz))
    res = run_campaign(target, EXEMPLARS, CANARY, "input_output", task_labels=with_decoys(["weather", "music"], 1),
                       config=CampaignConfig(trials=150, threat_models=("black-box",)), rng=np.random.default_rng(3))
    out = res.to_dict()
    floor = out["release_floor"]
    assert floor is not None and len(floor["counts"]) == 3
    rep = assess_power(res, target, N, eps, required=["noise_quarter", "no_noise"], min_detection=0.9)
    out["power"] = None if rep is None else rep.to_dict()
    verdict = CanaryMIAKind().verdict(out, eps, None)
    if expected == "violation":
        assert floor["counts"][2] == 0 and not floor["conformant"]
        assert verdict == "violation", out.get("verdict_reason")
    else:
        assert floor["conformant"] and verdict != "violation"


def test_bernoulli_kl_against_scipy():
    from app.audit.eprocess import bernoulli_kl

    for p, q in ((0.47, 0.83), (0.13, 0.169), (0.5, 0.5), (0.01, 0.99)):
        assert bernoulli_kl(p, q) == pytest.approx(stats.entropy([p, 1 - p], [q, 1 - q]), rel=1e-12, abs=1e-15)
    assert bernoulli_kl(0.0, 0.5) == pytest.approx(np.log(2.0), rel=1e-9)  # clipped, finite at the edges


def test_the_planner_names_a_decoy_design_for_winner_only_noise():
    """Two labels, winner-only required, black-box: the planner's own designs need thousands of model
    calls; the same designs with one decoy (labels 3) are listed as needing dataset.decoy_labels: 1, the
    cheapest named in the notes, and never recommended as if the configured audit could run them."""
    from app.audit.planner import plan_audit

    def noise_for(t, s):
        return rnm_noise({"epsilon": 2.0, "delta": 1e-5, "partitions": t, "shots_per_partition": s}, N)

    alts = ["noise_quarter", "no_noise", "winner_only"]
    cands = (2, 8)  # the cheapest designs: 8 partitions on two labels, 2 with a decoy (fewer candidates: a short test)
    out = plan_audit(noise_for, labels=2, exemplars=N, partitions=4, shots_per_partition=3, claimed_epsilon=2.0,
                     confidence=0.95, delta=1e-5, alternatives=alts, white_box=False, candidates=cands)
    decoy = [d for d in out["designs"] if d["requires"] == "dataset.decoy_labels: 1"]
    assert decoy and all(d["labels"] == 3 and not d["runnable"] for d in decoy)
    cheapest = min(decoy, key=lambda d: d["model_calls"])
    assert out["recommended"]["labels"] == 2 and cheapest["model_calls"] * 5 < out["recommended"]["model_calls"]
    note = next(n for n in out["notes"] if n.startswith("winner-only noise black-box"))
    assert f"{cheapest['partitions']} partitions x {cheapest['trials']} trials" in note
    # planned with the decoy (what the job does with dataset.decoy_labels: 1): that design is recommended
    with_decoy = plan_audit(noise_for, labels=3, exemplars=N, partitions=4, shots_per_partition=3, claimed_epsilon=2.0,
                            confidence=0.95, delta=1e-5, alternatives=alts, white_box=False, candidates=cands)
    assert with_decoy["recommended"]["model_calls"] == cheapest["model_calls"]


def test_decoy_names_in_a_canary_config():
    """Named decoys (a model may vote for a name: docs/audit.md#decoy-labels): appended as given; one
    equal to a task label, or twice the same, is refused naming the field."""
    from pydantic import ValidationError

    from app.jobs.kinds.canary_config import CanaryMIAConfig
    from app.jobs.kinds.canary_data import _query_labels

    base = {"target": {"type": "simulated", "params": {"epsilon": 1, "delta": 1e-5, "partitions": 4}},
            "dataset": {"size": 8, "labels": ["yes", "no"],
                        "exemplars": [{"input": f"x {i}", "output": ["yes", "no"][i % 2]} for i in range(8)],
                        "decoy_labels": ["other"]}, "query": "input_output"}
    cfg = CanaryMIAConfig.model_validate(base)
    assert _query_labels(cfg) == 3
    assert with_decoys(["yes", "no"], ["other", "zz"]) == ["yes", "no", "other", "zz"]
    for bad in (["no"], ["other", "other"]):
        with pytest.raises(ValidationError, match="decoy_labels"):
            CanaryMIAConfig.model_validate({**base, "dataset": {**base["dataset"], "decoy_labels": bad}})


@pytest.mark.parametrize("target,extra,expected", [
    ({"type": "remote", "url": "http://gw.example"}, {}, 1),  # released labels only: the README's CI audit
    ({"type": "remote", "url": "http://gw.example"}, {"threat_model": "black-box"}, 1),
    ({"type": "remote", "url": "http://gw.example"}, {"mode": "sequential"}, 1),
    ({"type": "remote", "url": "http://gw.example", "white_box": True}, {}, 0),  # internals: white-box sees it
    ({"type": "remote", "url": "http://gw.example"}, {"threat_model": "white-box"}, 0),
    ({"type": "remote", "url": "http://gw.example"}, {"mode": "bootstrap"}, 0),
    ({"type": "mechanism"}, {}, 0),  # in-process: its votes and noise are seen
    ({"type": "mechanism"}, {"threat_model": "black-box"}, 1),
    ({"type": "mechanism", "mechanism": "poe"}, {"threat_model": "black-box"}, 0),  # no rnm floor
    ({"type": "simulated"}, {"threat_model": "black-box"}, 0),  # votes given per label by the caller
    ({"type": "mechanism"}, {"task": "generation", "threat_model": "black-box"}, 0),
])
def test_auto_decoys_where_the_audit_sees_released_labels_only(target, extra, expected):
    """``decoy_labels`` defaults to "auto": one counted decoy where the evidence is black-box and the target
    is rnm (winner-only noise otherwise passes: docs/audit.md#decoy-labels), none elsewhere; the config as
    stored says which (a stored config validates to the same)."""
    from app.jobs.kinds.canary_config import CanaryMIAConfig

    params = {"epsilon": 1, "delta": 1e-5, "partitions": 4}
    cfg = CanaryMIAConfig.model_validate({"target": {**target, "params": params}, "dataset": {"size": 8}, **extra})
    assert cfg.dataset.decoy_labels == expected
    again = CanaryMIAConfig.model_validate(cfg.model_dump())
    assert again.dataset.decoy_labels == expected
    explicit = CanaryMIAConfig.model_validate({"target": {**target, "params": params},
                                               "dataset": {"size": 8, "decoy_labels": 0}, **extra})
    assert explicit.dataset.decoy_labels == 0


def test_a_black_box_context_is_one_label_so_the_assumed_votes_hold():
    """``dataset.pick`` "auto": a black-box rnm audit draws its context from one label of the pool (not the
    canary's), so every partition without the canary sees that label alone; random elsewhere (the same
    draw as before); an explicit one_label that the pool cannot fill is a 422 naming the field."""
    from app.jobs.errors import JobConfigError
    from app.jobs.kinds.canary_config import CanaryMIAConfig
    from app.jobs.kinds.canary_data import _dataset, _pick, pick_context

    params = {"epsilon": 1, "delta": 1e-5, "partitions": 3, "shots_per_partition": 4}
    remote = {"type": "remote", "url": "http://gw.example", "params": params}
    cfg = CanaryMIAConfig.model_validate({"target": remote, "dataset": {"size": 12}})
    pool, labels, _, _ = _dataset(cfg.dataset)
    assert len(set(labels)) == 5  # the bundled task: a random draw mixes its labels
    ex, how = pick_context(np.random.default_rng(1), pool, cfg, labels)
    assert how == {"pick": "one_label", "label": labels[0]} and len(ex) == 12
    assert {lab for _, lab in ex} == {labels[0]} and len(set(ex)) == 12
    mixed, _ = pick_context(np.random.default_rng(1), pool,
                            CanaryMIAConfig.model_validate({"target": remote, "dataset": {"size": 12, "pick": "random"}}),
                            labels)
    assert len({lab for _, lab in mixed}) > 1
    # a canary label given: the context is another label's
    cw = CanaryMIAConfig.model_validate({"target": remote, "dataset": {"size": 12}, "canary": {"label": labels[0]}})
    ex2, how2 = pick_context(np.random.default_rng(1), pool, cw, labels)
    assert how2["label"] != labels[0] and {lab for _, lab in ex2} == {how2["label"]}
    # white-box evidence: random, the draw the job made before `pick` existed
    wb = CanaryMIAConfig.model_validate({"target": {**remote, "white_box": True}, "dataset": {"size": 12}})
    ex3, how3 = pick_context(np.random.default_rng(5), pool, wb, labels)
    assert how3 == {"pick": "random"} and ex3 == _pick(np.random.default_rng(5), pool, 12)
    # a pool without enough of one label
    small = [{"input": f"x {i}", "output": ["yes", "no"][i % 2]} for i in range(8)]
    for pick, outcome in (("auto", "random"), ("one_label", "error")):
        c = CanaryMIAConfig.model_validate({"target": remote, "dataset": {"size": 6, "exemplars": small,
                                                                          "labels": ["yes", "no"], "pick": pick}})
        p, lab, _, _ = _dataset(c.dataset)
        if outcome == "error":
            with pytest.raises(JobConfigError) as exc:
                pick_context(np.random.default_rng(0), p, c, lab)
            assert exc.value.param == "config.dataset.pick"
        else:
            assert pick_context(np.random.default_rng(0), p, c, lab)[1]["pick"] == "random"
