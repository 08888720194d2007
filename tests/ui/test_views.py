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


def test_a_point_estimate_above_the_claim_is_grey_and_explained_when_the_bound_is_not():
    """A pass whose black-box point estimate (1.1) is above the claim (1) while its lower bound is below: the
    point bar is an estimate (grey, not red), the bound bar is within, and the note says why it is no violation."""
    est = {"black_box": {"epsilon_lower": 0.4, "epsilon_point": 1.1, "confidence": 0.95, "fpr": 0.1, "tpr": 0.2}}
    job = _job("canary_mia", {"epsilon": 0.4, "confidence": 0.95, "estimates": est}, claimed_epsilon=1.0)
    plot = {p["id"]: p for p in views.audit_charts(job)}["bound"]
    svg = str(plot["svg"])
    bars = re.findall(r'<rect class="([^"]+) bar"[^>]*data-name="([^"]+)" data-value="([^"]+)"', svg)
    assert [(c, n) for c, n, _ in bars] == [("bound-within", "black_box lower bound"),
                                            ("estimate", "black_box point est.")]
    assert "black_box 1.1) is above the claim" in plot["note"] and "not a violation" in plot["note"]
    # A lower bound above the claim is the violation, drawn as such, and no excuse is added.
    est["black_box"]["epsilon_lower"] = 1.3
    plot = {p["id"]: p for p in views.audit_charts(job)}["bound"]
    assert '<rect class="bound-over bar"' in str(plot["svg"]) and "not a violation" not in plot["note"]


def test_the_reference_line_is_named_in_the_top_margin_where_no_bar_reaches():
    for values in ([0.2, 0.95, 0.99], [5.0, 1.0]):
        svg = str(charts.bar_chart("power", "t", [(f"b{i}", v) for i, v in enumerate(values)], ylabel="p",
                                   ymax=1.05 if max(values) < 1 else None, ref=(0.9, "required 0.9")))
        label_y = float(re.search(r'<text class="legend ref-label" x="[^"]+" y="([^"]+)">required 0.9<', svg)[1])
        bar_tops = [float(y) for y in re.findall(r'<rect class="[^"]+ bar" x="[^"]+" y="([^"]+)"', svg)]
        assert label_y <= charts.MT and all(top >= charts.MT for top in bar_tops)


def test_timestamps_read_as_utc_seconds():
    from app.ui.views import when as _when

    assert _when("2026-11-26T13:05:12.123456+00:00") == "2026-11-26 13:05:12 UTC"
    assert _when("2026-11-26T14:05:12.5+01:00") == "2026-11-26 13:05:12 UTC"
    assert _when("not a time") == "not a time"
