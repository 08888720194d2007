"""White-box sequential audits of ``ksa`` (issue 28): ``app.audit.gen_noise_ksa`` reads the clean gaps,
k* and PTR's outcome from ksa's internals and tests both noises at once, as gen_power_ksa's
alternatives scale them.

The per-answer likelihoods are the mechanism's own laws (``aggregate.exponential_mechanism_distribution``,
which ``select_k`` samples, and ``ksa.pass_probability``) at the claim and at each multiplier, exactly.
Simulations with ksa's own noise code (``KSAWhiteBoxTarget``; fixed seeds; a rate is allowed up to
its level + 3 binomial sd of its run count, one-sided): no false violation beyond the level; noise x
1/10 and no_noise as the target never pass beyond the level and are found white-box where black-box
never finds them within the cap. The real ksa with the scripted keyword model: correct passes, one run
at 25x its epsilon is a white-box violation; the internals parse after a JSON round trip (a gateway).
"""

from __future__ import annotations

from functools import partial

import json
import math

import numpy as np
import pytest

from app.audit.eprocess import INF_LOG
from app.audit.gen_noise import white_box_evidence
from app.audit.gen_noise_ksa import KSAEvidence, KSAWhiteBoxTarget, observe_ksa, release_of
from app.audit.gen_power_ksa import scaled_config
from app.audit.gen_sequential import run_gen_sequential
from app.mechanisms import aggregate as agg
from app.mechanisms import ksa
from tests.audit.test_gen_power import EX
from tests.audit.test_gen_power_ksa import _design, ksa_params, ksa_target
from tests.audit.test_gen_sequential import ALPHA, ATTACK, MISS, REQUIRED, RUNS, _limit, fresh_audits
from tests.audit.test_gen_sequential import verdict_counts as _counts


_audits = partial(fresh_audits, eps=2.0)


def test_the_likelihoods_are_ksas_own_laws():
    """One answer's log ratios against the claim and each alternative are the logs of the mechanism's
    own law of k* (the exponential mechanism's distribution at eps_EM / f) times PTR's pass
    probability at the noise multiplier x f (``scaled_config``), to float precision; no_noise: a k*
    that is not an argmax, or a test outcome other than "gap > D", is impossible (either tie-break
    of the argmax is allowed)."""
    d = _design(ksa_params(4))
    ev = white_box_evidence(d, ("noise_tenth", "no_noise", "non_private"), 2.0, 1e-5)
    assert isinstance(ev, KSAEvidence) and ev.covers("no_noise") and not ev.covers("non_private")
    cfg, dd = d.config, float(d.config.gap_sensitivity)
    gaps = np.array([0.0, 3.0, 1.0, 3.0, 2.0])

    def log_p(f: float, k: int, passed: bool) -> float:
        c = scaled_config(cfg, f)
        pk = agg.exponential_mechanism_distribution(gaps, c.budget.epsilon_em / (2.0 * dd))[k - 1]
        pp = ksa.pass_probability(float(gaps[k - 1]), dd, c.budget.noise_multiplier, c.budget.delta0)
        return math.log(pk) + math.log(pp if passed else 1.0 - pp)
    for k, passed in ((2, True), (3, False), (4, False)):
        e = white_box_evidence(d, ("noise_tenth", "no_noise"), 2.0, 1e-5)
        assert isinstance(e, KSAEvidence)
        observe_ksa(e, gaps, k, passed)
        want = [log_p(f, k, passed) - log_p(1.0, k, passed) for f in (0.5, 0.25, 0.1)]
        assert e.log_down == pytest.approx(want, rel=1e-9, abs=1e-9)
        assert e.log_alt["noise_tenth"] == pytest.approx(log_p(1.0, k, passed) - log_p(0.1, k, passed), rel=1e-9)
        consistent = gaps[k - 1] == gaps.max() and passed == (gaps[k - 1] > dd)
        assert e.log_alt["no_noise"] == (0.0 if consistent else INF_LOG), (k, passed)


def test_the_internals_parse_after_a_json_round_trip():
    """The real release step's internals, as a gateway serves them, give (gaps, k*, passed); missing or
    malformed internals give None (the answer is then not read)."""
    d = _design(ksa_params(4))
    rel = ksa.release_keywords(d.answers()[1], d.config, np.random.default_rng(0))
    wire = json.loads(json.dumps({k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in rel.items()}))
    gaps, k, passed = release_of(wire)
    assert list(gaps) == list(rel["gaps"]) and k == rel["k"] and passed is rel["ptr_passed"]
    assert release_of(None) is None and release_of({"gaps": [1, 2], "k": 3, "ptr_passed": True}) is None
    assert release_of({"gaps": [1, 2], "k": 1, "ptr_passed": "yes"}) is None and release_of({"k": 1}) is None


@pytest.mark.parametrize("parts,alt,tie", [(4, "claimed", "positive"), (8, "noise_quarter", "positive"),
                                           (4, "no_noise", "other")])
def test_the_simulation_releases_y1_with_gen_powers_law(parts, alt, tie):
    """ksa's own noise code on the design model's answers releases y1 with gen_power_ksa's exact law:
    4 binomial sd of 1500 draws per hypothesis."""
    d = _design(ksa_params(parts))
    t = KSAWhiteBoxTarget(d, alt, tie)
    rng = np.random.default_rng(5)
    c1 = [*EX[1:], ATTACK.canary.exemplar()]
    for ctx, p in ((c1, t.law[0]), (EX, t.law[1])):
        got = sum(t.observe(ctx, ATTACK, rng).label == ATTACK.labels[0] for _ in range(1500)) / 1500
        assert abs(got - p) <= 4.0 * math.sqrt(max(p * (1 - p), 1e-4) / 1500), (alt, got, p)


@pytest.mark.parametrize("parts", [4, 8])
def test_correct_white_box_ksa_false_violations_within_level(parts):
    """1000 audits of a correct ksa seen white-box (claim 2, cap 200): false violations <= alpha + 3 sd;
    most pass, the white-box half reading every answer (non_private: black-box only)."""
    d = _design(ksa_params(parts))
    res = _audits(lambda: KSAWhiteBoxTarget(d), d, RUNS)
    c = _counts(res)
    assert c.get("violation", 0) / RUNS <= _limit(ALPHA), c
    assert c.get("pass", 0) / RUNS > 0.85, c
    r = next(r for r in res if r.verdict == "pass")
    assert "white-box" in r.decided_by and r.white_box["answers_read"] == r.trials
    assert set(r.white_box["e_alternatives"]) == {"noise_tenth", "no_noise"}


@pytest.mark.parametrize("parts,alt,tie", [(4, "noise_tenth", "positive"), (8, "noise_tenth", "positive"),
                                           (4, "no_noise", "positive"), (4, "no_noise", "other")])
def test_noise_tenth_and_no_noise_are_found_white_box(parts, alt, tie):
    """The target IS the alternative (both noises x 1/10; no noise, a tie broken either way): 200
    audits white-box: no pass (<= 1 - min_detection + 3 sd), >= 95% violations, decided white-box, within a few
    answers on average; the same seeds black-box (the first 10, cap 100) never decide: the released
    text hardly moves (at 8 partitions, noise x 1/10 releases y1 less often than the claim)."""
    d = _design(ksa_params(parts))
    wb = _audits(lambda: KSAWhiteBoxTarget(d, alt, tie), d, 200)
    c = _counts(wb)
    assert c.get("pass", 0) / 200 <= _limit(MISS, 200) and c.get("violation", 0) / 200 >= 0.95, c
    assert {r.decided_by for r in wb if r.verdict == "violation"} == {"white-box"}
    assert np.mean([r.trials for r in wb]) <= 8, np.mean([r.trials for r in wb])
    bb = _audits(lambda: KSAWhiteBoxTarget(d, alt, tie), d, 10, cap=100, white_box=False)
    assert all(r.verdict == "inconclusive" for r in bb), _counts(bb)


def test_real_ksa_white_box():
    """The real ksa (partitioning, member answers, keyword release, zero-shot prompt) with the scripted
    keyword model, 4 partitions, claim 2: correct, it passes with the white-box half; run at epsilon 50
    while claiming 2 (its own calibration there: both noises far below the claim's) it is a white-box
    violation within a few answers; the target's internals are read on every answer."""
    d = _design(ksa_params(4))
    cases = ((ksa_target(4, 2.0), "pass", 200), (ksa_target(4, 50.0), "violation", 6))
    for target, want, most in cases:
        r = run_gen_sequential(target, EX, ATTACK, claimed_epsilon=2.0, delta=1e-5, design=d, alternatives=REQUIRED,
                               alpha=ALPHA, cap=200, rng=np.random.default_rng(28), white_box=True)
        assert r.verdict == want and "white-box" in r.decided_by and r.trials <= most, (target.name, r.reason)
        assert r.white_box["answers_read"] == r.trials
