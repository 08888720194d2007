"""Audits of the bundled SmolLM2-135M with real model calls (few: the model is slow on shared CPUs).

The statistics that need many trials run on the clean votes these calls collect (bootstrap,
tight-auditing Algorithm 1); the measured behaviour of the small model is asserted only where it
is the point of the test (the canary moves a vote), with the values printed for docs/audit.md.
"""

from __future__ import annotations

import numpy as np
import pytest

from app.audit import (
    CampaignConfig,
    MechanismTarget,
    RemoteTarget,
    bootstrap_audit,
    make_canary,
    rnm_noise,
    run_campaign,
)
from app.icl import load_bundled

PARAMS = {"epsilon": 1.0, "delta": 1e-5, "partitions": 2, "shots_per_partition": 1}


_ds = load_bundled()  # the bundled task, whatever it is called
TEMPLATE = {"instruction": _ds.template.instruction, "input_prefix": _ds.template.input_prefix,
            "output_prefix": _ds.template.output_prefix}
CANARY_LABEL = _ds.labels[-1]


@pytest.fixture(scope="module")
def task():
    # two short exemplars with labels other than the canary's
    picked = [e for e in _ds.exemplars() if e[1] != CANARY_LABEL and len(e[0]) < 70][:2]
    return picked, list(_ds.labels)


def _canary(seed=0):
    return make_canary("hex", np.random.default_rng(seed), label=CANARY_LABEL)


def test_bootstrap_from_real_votes_passes_correct_and_catches_broken(lm, task):
    exemplars, labels = task
    target = MechanismTarget(lm, "rnm", PARAMS, TEMPLATE)
    cfg = CampaignConfig(mode="bootstrap", n_llm=3, n_sample=100_000)
    r = run_campaign(target, exemplars, _canary(), "input_output", task_labels=labels, template=TEMPLATE,
                     config=cfg, rng=np.random.default_rng(1))
    assert r.model_calls == 6 and r.naive_model_calls == 100_000 * 2 * 2
    vw = np.array([t["clean_votes"] for t in r.trials if t["member"]])
    vo = np.array([t["clean_votes"] for t in r.trials if not t["member"]])
    pos = r.attack.positive_index
    print("clean votes with:", vw.tolist(), "without:", vo.tolist(), "labels", r.attack.labels)
    assert vw.shape == vo.shape == (3, len(r.attack.labels)) and np.all(vw.sum(axis=1) == 2)
    assert r.epsilon_claimed == pytest.approx(1.0) and r.violation is False
    # The same real votes under the broken noise (a tenth): leakage can only grow. Whether it crosses the
    # claim depends on whether this small model moves the signal label's vote (measured: it rarely copies
    # the canary's label; docs/audit.md); the simulated tests assert the catch.
    broken = bootstrap_audit(vw, vo, rnm_noise(PARAMS, 2, "noise_tenth"), pos, r.attack.negative_index,
                             rng=np.random.default_rng(2), n_sample=100_000, epsilon_theory=1.0, confidence=0.975)
    print({k: (v.epsilon_lower, v.epsilon_gdp) for k, v in broken.estimates.items()},
          {k: (v.epsilon_lower, v.epsilon_gdp) for k, v in r.estimates.items()})
    for tm in ("black-box", "white-box"):
        assert broken.estimates[tm].epsilon_lower >= r.estimates[tm].epsilon_lower - 0.05


def test_direct_in_process_broken_voting_reports_its_internals(lm, task):
    exemplars, labels = task
    target = MechanismTarget(lm, "rnm", PARAMS, TEMPLATE, bug="noise_tenth")
    r = run_campaign(target, exemplars, _canary(), "input_output", task_labels=labels, template=TEMPLATE,
                     config=CampaignConfig(trials=6), rng=np.random.default_rng(3))
    assert r.model_calls == 6 and len(r.trials) == 6 and sum(t["member"] for t in r.trials) == 3
    assert r.epsilon_claimed == pytest.approx(1.0)  # the broken mechanism still claims rnm's cost
    assert all(np.isfinite(t["statistic"]) for t in r.trials)


def test_nonprivate_icl_leaks(lm, task):
    """Acceptance 4 (small): the non-private one-prompt ICL is a deterministic function of the context,
    so any change the canary makes to its label distribution is leakage. Measured with this model
    (hex canary, input-output query): the canary moves the distribution at both positions, and the
    released label changes for at least one position (4 calls; values printed for docs/audit.md)."""
    from app.audit import paired_contexts, resolve_query

    exemplars, labels = task
    target = MechanismTarget(lm, "icl", {}, TEMPLATE)
    can = _canary()
    attack = resolve_query("input_output", can, labels, exemplars, TEMPLATE)
    changed = []
    for index in range(2):
        c1, c0 = paired_contexts(exemplars, can.exemplar(), index)
        o1, o0 = target.observe(c1, attack, None), target.observe(c0, attack, None)
        print("canary at", index, "C1:", o1.label, np.round(o1.noisy_scores, 3).tolist(),
              "C0:", o0.label, np.round(o0.noisy_scores, 3).tolist())
        assert np.max(np.abs(o1.noisy_scores - o0.noisy_scores)) > 1e-3
        changed.append(o1.label != o0.label)
    assert any(changed)


def test_remote_gateway_equals_in_process_with_the_same_seeds(live_server, lm, task):
    """The same campaign code against the HTTP gateway (black-box and white-box through internals):
    with seeded noise the gateway's answers equal the in-process mechanism's, trial by trial."""
    exemplars, labels = task
    remote = RemoteTarget(live_server, "rnm", dict(PARAMS), TEMPLATE, white_box=True, seeded=True)
    cfg = CampaignConfig(trials=4)
    try:
        rr = run_campaign(remote, exemplars, _canary(), "input_output", task_labels=labels, template=TEMPLATE,
                          config=cfg, rng=np.random.default_rng(5))
    finally:
        remote.close()
    assert len(remote.datasets) == 2  # C1 and C0, each registered once
    assert rr.epsilon_claimed == pytest.approx(1.0) and set(rr.estimates) == {"black-box", "white-box"}

    class SeededLocal(MechanismTarget):
        """In-process, with the generator the gateway builds from the seed the remote target sent."""

        def observe(self, context, attack, rng):
            return super().observe(context, attack, np.random.default_rng(int(rng.integers(0, 2**53))))

    local = SeededLocal(lm, "rnm", PARAMS, TEMPLATE)
    lr = run_campaign(local, exemplars, _canary(), "input_output", task_labels=labels, template=TEMPLATE,
                      config=cfg, rng=np.random.default_rng(5))
    assert [t["released"] for t in rr.trials] == [t["released"] for t in lr.trials]
    np.testing.assert_allclose([t["statistic"] for t in rr.trials], [t["statistic"] for t in lr.trials], rtol=1e-9)
