"""The pages' numbers from the API's objects (pure functions): which plots a result supports, the
ROC, the claim's privacy region, and escaping of anything a submitter controls."""

from __future__ import annotations

import math
import re

from app.ui import charts, views


def _job(kind: str, result: dict | None, **extra) -> dict:
    return {"kind": kind, "config": extra.pop("config", {}), "claimed_epsilon": extra.pop("claimed_epsilon", None),
            "claimed_delta": None, "result": result, "status": "succeeded", "progress": {"fraction": 1.0},
            **extra}


def test_iclinf_per_position_curves_are_plotted_with_their_values():
    evil = "<script>alert(1)</script>"
    result = {"epsilon": 0.3, "models": [{"model": evil, "classification": [
        {"variant": "raw", "calibrate": False, "n_shots": 3, "per_position_mean": [0.5, 0.25, 0.125]}]}]}
    plots = {p["id"]: p for p in views.audit_charts(_job("iclinf", result, claimed_epsilon=1.0))}
    assert set(plots) == {"bound", "iclinf"}
    svg = str(plots["iclinf"]["svg"])
    ys = [float(y) for y in re.findall(r'data-y="([^"]+)"', svg)]
    xs = [float(x) for x in re.findall(r'data-x="([^"]+)"', svg)]
    assert ys == [0.5, 0.25, 0.125] and xs == [1.0, 2.0, 3.0]
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert "empirical estimate" in str(plots["bound"]["note"])


def test_roc_from_trials_is_the_exact_empirical_curve():
    trials = [{"member": m, "statistic": s} for m, s in
              [(True, 3.0), (True, 2.0), (False, 2.0), (False, 1.0), (True, 0.5), (False, 0.0)]]
    fpr, tpr = views._roc_from_trials(trials)
    # thresholds above 3, 2 (a tie of one member and one non-member), 1, 0.5, 0
    assert fpr == [0.0, 0.0, 1 / 3, 2 / 3, 2 / 3, 1.0]
    assert tpr == [0.0, 1 / 3, 2 / 3, 2 / 3, 1.0, 1.0]
    assert views._roc_from_trials([{"member": True, "statistic": 1.0}]) is None


def test_privacy_region_is_the_dp_tradeoff_bound():
    xs, ys = views._privacy_region(1.0, 0.0, n=4)
    e = math.e
    assert ys == [min(1.0, e * x, 1 - (1 - x) / e) for x in xs]
    assert ys[0] == 0.0 and ys[-1] == 1.0


def test_no_result_no_plots_and_targets_are_described():
    assert views.audit_charts(_job("sleep", None)) == []
    job = _job("canary_mia", None, config={"target": {"type": "remote", "mechanism": "rnm",
                                                      "url": "https://gw.example", "params": {"epsilon": 2}}})
    assert views.describe_target(job) == "remote · rnm · https://gw.example · ε=2"
    assert views.bound_of(job) is None


def test_gauge_fraction_is_clamped_and_labelled():
    svg = str(charts.gauge(9.0, 8.0))
    assert 'data-fraction="1.0"' in svg and "gauge-fill bad" in svg
    assert 'data-fraction="0.25"' in str(charts.gauge(2.0, 8.0))
