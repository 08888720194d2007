"""What the pages show, computed from the API's own objects (job resources, dataset / budget / ledger
objects): no second copy of the redaction, the verdict or the composition."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from markupsafe import Markup

from app.ui import charts


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


# ---------------------------------------------------------------------------
# Audits
# ---------------------------------------------------------------------------

BOUND_LABEL = {
    "canary_mia": "rigorous lower bound",
    "iclinf": "empirical estimate (not a bound)",
    "epsilon": "calibrated (theory)",
}


def describe_target(job: dict[str, Any]) -> str:
    cfg = job.get("config") or {}
    t = cfg.get("target")
    if isinstance(t, dict):
        params = t.get("params") or {}
        parts = [str(t.get("type") or "target")]
        if t.get("mechanism"):
            parts.append(str(t["mechanism"]))
        if t.get("url"):
            parts.append(str(t["url"]))
        if "epsilon" in params:
            parts.append(f"ε={params['epsilon']}")
        if t.get("bug"):
            parts.append(f"bug={t['bug']}")
        return " · ".join(parts)
    if job["kind"] == "epsilon" and cfg.get("mechanism"):
        return str(cfg["mechanism"])
    if job["kind"] == "iclinf":
        models = cfg.get("models") or ["default model"]
        return ", ".join(str(m) for m in models)
    return "—"


def rerun_note(config: Any) -> str | None:
    """What the re-run form says of a config that cannot be submitted as shown (redacted, summarised)."""
    from app.jobs.config_view import has_summary
    from app.jobs.secrets import REDACTED

    notes = []
    if REDACTED in repr(config):
        notes.append("The original config held a credential, shown as \"[redacted]\": put the target's api_key or "
                     "api_key_env back before submitting.")
    if has_summary(config):
        notes.append("The original config held inline texts (exemplars, canary text...), shown only as a summary "
                     "({\"omitted\": \"inline text\", ...}): put the texts back before submitting.")
    return " ".join(notes) or None


def claim_of(job: dict[str, Any]) -> tuple[float | None, float | None]:
    r = job.get("result") if isinstance(job.get("result"), dict) else {}
    eps = _num(job.get("claimed_epsilon"))
    if eps is None:
        eps = _num(r.get("epsilon_claimed"))
    delta = _num(job.get("claimed_delta"))
    if delta is None:
        delta = _num(r.get("delta_claimed"))
    return eps, delta


def bound_of(job: dict[str, Any]) -> dict[str, Any] | None:
    r = job.get("result") if isinstance(job.get("result"), dict) else None
    if not r or _num(r.get("epsilon")) is None:
        return None
    return {"epsilon": _num(r["epsilon"]), "delta": _num(r.get("delta")), "confidence": _num(r.get("confidence")),
            "label": BOUND_LABEL.get(job["kind"], "reported epsilon")}


def row(job: dict[str, Any]) -> dict[str, Any]:
    eps, delta = claim_of(job)
    return {"job": job, "target": describe_target(job), "claim_epsilon": eps, "claim_delta": delta,
            "bound": bound_of(job), "active": job["status"] in ("queued", "running"),
            "percent": round(100 * float(job["progress"]["fraction"] or 0.0), 1)}


def _roc_from_trials(trials: list[dict[str, Any]]) -> tuple[list[float], list[float]] | None:
    """Empirical ROC of the white-box statistic (decide 'member' when it exceeds a threshold)."""
    pts = [(float(t["statistic"]), bool(t["member"])) for t in trials
           if isinstance(t, dict) and _num(t.get("statistic")) is not None and "member" in t]
    pos = sum(1 for _, m in pts if m)
    neg = len(pts) - pos
    if pos == 0 or neg == 0:
        return None
    pts.sort(key=lambda p: -p[0])
    fpr, tpr, tp, fp = [0.0], [0.0], 0, 0
    for i, (s, m) in enumerate(pts):
        tp += m
        fp += not m
        if i + 1 == len(pts) or pts[i + 1][0] != s:
            fpr.append(fp / neg)
            tpr.append(tp / pos)
    return fpr, tpr


def _privacy_region(eps: float, delta: float, n: int = 60) -> tuple[list[float], list[float]]:
    """The largest TPR at each FPR that an (eps, delta)-DP target allows (Kairouz et al. 2015, Thm 2.1):
    TPR <= min(e^eps FPR + delta, 1 - e^-eps (1 - delta - FPR))."""
    xs = [i / n for i in range(n + 1)]
    e = math.exp(min(eps, 50.0))
    ys = [min(1.0, e * x + delta, 1.0 - (1.0 - delta - x) / e) for x in xs]
    return xs, [max(0.0, y) for y in ys]


def audit_charts(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The plots a job's result supports: [{"id", "title", "svg", "note"}]."""
    r = job.get("result") if isinstance(job.get("result"), dict) else None
    if not r:
        return []
    out: list[dict[str, Any]] = []
    claim_eps, claim_delta = claim_of(job)
    estimates = r.get("estimates") if isinstance(r.get("estimates"), dict) else {}

    # ROC / TPR-FPR: the measured operating points, the white-box statistic's empirical ROC,
    # and the boundary that the claim allows.
    trials = r.get("trials") if isinstance(r.get("trials"), list) else []
    roc = _roc_from_trials(trials)
    if estimates or roc:
        series: list[dict[str, Any]] = []
        if roc:
            series.append({"name": "white-box statistic, empirical ROC", "x": roc[0], "y": roc[1], "cls": 0})
        if claim_eps is not None:
            xs, ys = _privacy_region(claim_eps, claim_delta or 0.0)
            series.append({"name": f"most an ε={claim_eps:.3g} target allows", "x": xs, "y": ys, "cls": 3,
                           "dashed": True})
        series.append({"name": "chance", "x": [0.0, 1.0], "y": [0.0, 1.0], "cls": 5, "dashed": True})
        for i, (tm, est) in enumerate(sorted(estimates.items())):
            if _num(est.get("fpr")) is not None and _num(est.get("tpr")) is not None:
                series.append({"name": f"{tm} attack (FPR, TPR)", "x": [est["fpr"]], "y": [est["tpr"]],
                               "cls": 1 + i, "points": True})
        out.append({"id": "roc", "title": "ROC: true vs false positive rate",
                    "svg": charts.line_chart("roc", "ROC: TPR against FPR", series, xlabel="false positive rate",
                                             ylabel="true positive rate", xlim=(0, 1), ylim=(0, 1),
                                             legend_at="bottom-right"),
                    "note": "Points: the attacks' counted (FPR, TPR). The empirical ROC is descriptive (all trials, "
                            "threshold not fixed in advance); only the points carry the rigorous bound."})

    # Bound vs claim, per threat model, with the confidence each bound holds at.
    if estimates:
        bars: list[tuple[str, float | None]] = []
        classes: list[str | None] = []
        over_points: list[str] = []
        for tm, est in sorted(estimates.items()):
            lower, point = _num(est.get("epsilon_lower")), _num(est.get("epsilon_point"))
            over = claim_eps is not None and lower is not None and lower > claim_eps
            bars.append((f"{tm}\nlower bound", lower))
            classes.append("bound-over" if over else "bound-within")
            bars.append((f"{tm}\npoint est.", point))
            classes.append("estimate")
            if est.get("gdp_applicable"):
                bars.append((f"{tm}\nGDP est.", _num(est.get("epsilon_gdp"))))
                classes.append("estimate")
            if claim_eps is not None and point is not None and point > claim_eps and not over:
                over_points.append(f"{tm} {point:.3g}")
        conf = _num(r.get("confidence"))
        ref = (claim_eps, f"claim ε = {claim_eps:.3g}") if claim_eps is not None else None
        note = (f"Lower bounds are rigorous at confidence {conf:.3g} overall "
                f"(each threat model at {_num(next(iter(estimates.values())).get('confidence')) or conf:.3g}); "
                "point and GDP values are estimates, not bounds (grey)." if conf is not None else
                "Lower bounds are rigorous; point and GDP values are estimates (grey).")
        if over_points:
            # A point estimate above the claim is what a correct mechanism shows about half the time near its
            # claim: only a lower bound above the claim is evidence of a violation.
            note += (f" The point estimate ({', '.join(over_points)}) is above the claim, but its lower bound is "
                     "not: sampling noise of this many trials is consistent with the claim, so it is not a violation; "
                     "only a lower bound above the claim is.")
        out.append({"id": "bound", "title": "Empirical epsilon vs the claim",
                    "svg": charts.bar_chart("bound", "Empirical epsilon against the claim", bars, ylabel="epsilon",
                                            ref=ref, classes=classes),
                    "note": note})
    elif bound_of(job) and claim_eps is not None:
        b = bound_of(job)
        out.append({"id": "bound", "title": "Epsilon vs the claim",
                    "svg": charts.bar_chart("bound", "Epsilon against the claim", [(b["label"], b["epsilon"])],
                                            ylabel="epsilon", ref=(claim_eps, f"claim ε = {claim_eps:.3g}")),
                    "note": b["label"]})

    # Power: P(detect) of each alternative the audit was asked to see.
    power = r.get("power") if isinstance(r.get("power"), dict) else None
    alts = power.get("alternatives") if power and isinstance(power.get("alternatives"), dict) else None
    if alts:
        md = _num(power.get("min_detection"))
        bars = [(name, _num(a.get("detection"))) for name, a in alts.items() if isinstance(a, dict)]
        out.append({"id": "power", "title": "Power: probability of detecting each alternative",
                    "svg": charts.bar_chart("power", "P(detect) per alternative", bars, ylabel="P(detect)",
                                            ymax=1.05, ref=(md, f"required {md:.2g}") if md is not None else None),
                    "note": "'claimed' is the claim itself: detecting it is a false alarm (at most 1 - confidence). "
                            f"Required: {', '.join(power.get('required') or []) or 'none'}; "
                            f"sufficient: {power.get('sufficient')}."})

    # Score histogram of the white-box statistic, members vs non-members.
    stats = [(float(t["statistic"]), bool(t["member"])) for t in trials
             if isinstance(t, dict) and _num(t.get("statistic")) is not None and "member" in t]
    if len(stats) >= 4:
        lo, hi = min(s for s, _ in stats), max(s for s, _ in stats)
        nb = 20
        width = (hi - lo) / nb or 1.0
        centers = [lo + (i + 0.5) * width for i in range(nb)]
        series = []
        for cls, (name, member) in enumerate((("members (canary in)", True), ("non-members", False))):
            counts = [0] * nb
            for s, m in stats:
                if m == member:
                    counts[min(nb - 1, int((s - lo) / width))] += 1
            series.append({"name": name, "x": centers, "y": counts, "cls": cls})
        thr = _num(r.get("threshold"))
        out.append({"id": "histogram", "title": "Score histogram (white-box statistic)",
                    "svg": charts.line_chart("histogram", "Histogram of the white-box statistic", series,
                                             xlabel="statistic" + (f" (threshold {thr:.3g})" if thr is not None else ""),
                                             ylabel="trials"),
                    "note": "Counts per bin of the statistic the white-box attack thresholds."})

    # ICLInf: per-position curves (ICLInf RQ2, Figure 1).
    series = []
    for m in r.get("models") or []:
        for run in (m.get("classification") or []) if isinstance(m, dict) else []:
            ys = run.get("per_position_mean")
            if isinstance(ys, list) and ys:
                name = f"{m.get('model')} {run.get('variant')}{' cal' if run.get('calibrate') else ''} n={run.get('n_shots')}"
                series.append({"name": name, "x": list(range(1, len(ys) + 1)), "y": ys, "points": True})
    if series:
        out.append({"id": "iclinf", "title": "ICLInf per removed position",
                    "svg": charts.line_chart("iclinf", "ICLInf per removed position", series,
                                             xlabel="position of the removed exemplar", ylabel="mean max |Δ log p|"),
                    "note": "Mean influence of removing the exemplar at each position (ICLInf, RQ2)."})
    return out


# ---------------------------------------------------------------------------
# Budgets
# ---------------------------------------------------------------------------


def _ts(s: str) -> float:
    t = datetime.fromisoformat(s.replace("Z", "+00:00"))
    return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp()


def burn_down(budget: dict[str, Any], entries: list[dict[str, Any]], created_at: str) -> Markup:
    """Epsilon remaining over time: budget minus the ledger's own composed ``epsilon_spent_after``
    after each charge (not a sum of per-answer epsilons), then the account's value now."""
    total = float(budget["epsilon"])
    start = _ts(created_at)
    xs, ys = [start], [total]
    for e in entries:
        xs.append(_ts(e["created_at"]))
        ys.append(total - float(e["epsilon_spent_after"]))
    now = datetime.now(timezone.utc).timestamp()
    xs.append(max(now, xs[-1]))
    ys.append(total - float(budget["epsilon_spent"]))
    span = max(xs[-1] - start, 1.0)
    # Time axis in a unit that suits the ledger's age.
    unit, scale = next((u, sc) for limit, u, sc in ((120, "s", 1), (7200, "min", 60), (172800, "h", 3600),
                                                     (math.inf, "days", 86400)) if span <= limit)
    rel = [(x - start) / scale for x in xs]

    def label(t: float) -> str:
        return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")

    svg = charts.line_chart(
        "burndown", "Budget burn-down: epsilon remaining (composed)",
        [{"name": "epsilon remaining", "x": rel, "y": ys, "cls": 0, "points": True}],
        xlabel=f"{unit} since {label(start)} UTC (dataset created)", ylabel="epsilon remaining",
        xlim=(0.0, span / scale), ylim=(0.0, total * 1.05), hlines=[(total, f"budget ε = {total:.4g}")],
        legend_at="bottom-right")
    return svg


def when(iso: str) -> str:
    """An ISO timestamp as people read it: '2026-11-26 13:05:12 UTC' (no microseconds, no offset noise)."""
    from datetime import datetime, timezone

    try:
        t = datetime.fromisoformat(iso)
    except ValueError:
        return iso[:19].replace("T", " ")
    if t.tzinfo is not None:
        t = t.astimezone(timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S") + " UTC"
