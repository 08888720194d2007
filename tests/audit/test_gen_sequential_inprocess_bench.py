"""benchmarks/bench_gen_sequential.py --inprocess cannot rot: its comparison on the bundled SmolLM2 +
MiniLM (benchmarks/gen_sequential_inprocess.py), cut to one esa claim with a cap of one pair, and its
fixed audit of the broken target cut to 4 trials."""

from __future__ import annotations

import pytest

from tests.scripts import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/gen_sequential_inprocess.py")


def test_esa_cell_plans_and_decides_white_box_after_one_pair(bench, lm, embedder):
    """Claim 1, cap 2: the planner's fixed counts (no black-box count could pass this 2-partition
    design; white-box + black-box 14, the white-box split's minimum: the noise test sees every
    alternative) are reported and the fixed audit is not run (fixed_max
    0) with why; the white-box sequential audit passes the correct esa and finds the one run at 100x
    the claimed epsilon (sigma / ~100) after one pair on the noise; black-box one pair decides
    neither (the violation test needs >= 7 pairs won at claim 1). Every cell counts its generate
    calls."""
    out = bench.inprocess(lm, embedder, mechanisms=("esa",), epsilons=(1.0,), targets=("correct", "broken"),
                          cap=2, fixed_max=0)
    (row,) = out["rows"]
    assert row["fixed_planned"] == {"black-box": None, "white-box": 14}, row["fixed_planned"]
    cells = row["targets"]
    for kind, want in (("correct", "pass"), ("broken", "violation")):
        c = cells[kind]
        assert c["fixed"]["run"] is False and "fixed_max 0" in c["fixed"]["why"], c["fixed"]
        wb, bb = c["sequential_white_box"], c["sequential_black_box"]
        assert (wb["verdict"], wb["decided_by"], wb["model_calls"]) == (want, "white-box", 2), (kind, wb["reason"])
        assert (bb["verdict"], bb["model_calls"], bb["trials"]) == ("inconclusive", 2, 2), (kind, bb["reason"])
    assert "| esa | 1 | broken | None / 14 | not run |" in bench.table(out)


def test_fixed_audit_of_the_broken_target_checks_the_claimed_sigma(bench, lm, embedder):
    """RunsAt claims its params' epsilon: the fixed white-box audit tests the noise against the
    claimed sigma, so 4 trials of esa at 100x the claim fail the conformance test: a violation (the
    canary_mia job's verdict), 4 generate calls."""
    broken = bench.make_target(lm, embedder, "esa", "broken", 1.0)
    claimed = bench.make_target(lm, embedder, "esa", "correct", 1.0)
    assert broken.claimed_sigma(4) == pytest.approx(claimed.claimed_sigma(4))
    r = bench.fixed_audit(broken, claimed, 1.0, 4, ("black-box", "white-box"), seed=3)
    assert (r["verdict"], r["model_calls"]) == ("violation", 4), r["reason"]
    assert "does not match its claim" in r["reason"] and r["threat_models"] == ["black-box", "white-box"]
