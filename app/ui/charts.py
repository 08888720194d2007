"""Inline SVG charts, drawn on the server (no JavaScript, no CDN; readable without scripts).

Each chart is an ``<svg role="img">`` with a ``<title>`` and a ``<desc>`` stating its numbers for
screen readers, and ``data-*`` attributes carrying the plotted values (the browser tests compare
them with the JSON API). Colours come from the stylesheet classes (``s0``..``s5``), chosen for
contrast on a white background.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from markupsafe import Markup, escape

W, H = 560, 300
ML, MR, MT, MB = 56, 16, 16, 44  # margins: room for the axis labels


def _f(x: float) -> str:
    return f"{x:.2f}"


def _num(x: float) -> str:
    """A value for a data-* attribute: full precision (repr), so tests can compare exactly."""
    return repr(float(x))


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    out, v = [], start
    while v <= hi + step * 1e-9:
        out.append(round(v, 12))
        v += step
    return out


def _oneline(label: str) -> str:
    return label.replace("\n", " ")


def _fmt_tick(v: float) -> str:
    return f"{v:.3g}"


class _Frame:
    def __init__(self, xlim: tuple[float, float], ylim: tuple[float, float]) -> None:
        self.x0, self.x1 = xlim
        self.y0, self.y1 = ylim
        if self.x1 <= self.x0:
            self.x1 = self.x0 + 1
        if self.y1 <= self.y0:
            self.y1 = self.y0 + 1

    def x(self, v: float) -> float:
        return ML + (v - self.x0) / (self.x1 - self.x0) * (W - ML - MR)

    def y(self, v: float) -> float:
        return H - MB - (v - self.y0) / (self.y1 - self.y0) * (H - MT - MB)

    def axes(self, xlabel: str, ylabel: str, xticks: Sequence[tuple[float, str]] | None = None) -> list[str]:
        parts = [f'<rect class="plot-bg" x="{ML}" y="{MT}" width="{W - ML - MR}" height="{H - MT - MB}"/>']
        for v in _ticks(self.y0, self.y1):
            y = self.y(v)
            parts.append(f'<line class="grid" x1="{ML}" x2="{W - MR}" y1="{_f(y)}" y2="{_f(y)}"/>'
                         f'<text class="tick" x="{ML - 6}" y="{_f(y + 4)}" text-anchor="end">{_fmt_tick(v)}</text>')
        for v, label in (xticks if xticks is not None else [(t, _fmt_tick(t)) for t in _ticks(self.x0, self.x1)]):
            x = self.x(v)
            lines = "".join(f'<tspan x="{_f(x)}" dy="{0 if i == 0 else 12}">{escape(part)}</tspan>'
                            for i, part in enumerate(label.split("\n")))  # "\n": a two-line label
            parts.append(f'<line class="grid" x1="{_f(x)}" x2="{_f(x)}" y1="{MT}" y2="{H - MB}"/>'
                         f'<text class="tick" x="{_f(x)}" y="{H - MB + 16}" text-anchor="middle">{lines}</text>')
        parts.append(f'<line class="axis" x1="{ML}" x2="{W - MR}" y1="{H - MB}" y2="{H - MB}"/>'
                     f'<line class="axis" x1="{ML}" x2="{ML}" y1="{MT}" y2="{H - MB}"/>')
        parts.append(f'<text class="label" x="{(ML + W - MR) / 2}" y="{H - 6}" text-anchor="middle">{escape(xlabel)}</text>')
        parts.append(f'<text class="label" transform="translate(14 {(MT + H - MB) / 2}) rotate(-90)" '
                     f'text-anchor="middle">{escape(ylabel)}</text>')
        return parts


def _svg(kind: str, title: str, desc: str, body: list[str], legend: Sequence[tuple[int, str]] = (),
         attrs: str = "", legend_at: str = "top-left") -> Markup:
    leg = []
    for i, (cls, name) in enumerate(legend):
        if legend_at == "bottom-right":
            x, y = W - MR - 190, H - MB - 10 - 16 * (len(legend) - 1 - i)
            leg.append(f'<rect class="legend-bg" x="{x - 4}" y="{y - 11}" width="190" height="16"/>')
        else:
            x, y = ML + 10, MT + 8 + 16 * i
        leg.append(f'<rect class="s{cls} fill" x="{x}" y="{y - 8}" width="10" height="10"/>'
                   f'<text class="legend" x="{x + 16}" y="{y + 1}">{escape(name)}</text>')
    return Markup(
        f'<svg class="chart" data-chart="{escape(kind)}" viewBox="0 0 {W} {H}" role="img" '
        f'aria-labelledby="t-{escape(kind)} d-{escape(kind)}" preserveAspectRatio="xMidYMid meet"{attrs}>'
        f'<title id="t-{escape(kind)}">{escape(title)}</title><desc id="d-{escape(kind)}">{escape(desc)}</desc>'
        + "".join(body) + "".join(leg) + "</svg>")


def _polyline(frame: _Frame, xs: Sequence[float], ys: Sequence[float], cls: int, step: bool = False,
              dashed: bool = False) -> str:
    pts: list[str] = []
    prev = None
    for x, y in zip(xs, ys):
        if step and prev is not None:
            pts.append(f"{_f(frame.x(x))},{_f(frame.y(prev))}")
        pts.append(f"{_f(frame.x(x))},{_f(frame.y(y))}")
        prev = y
    return f'<polyline class="s{cls} line{" dashed" if dashed else ""}" points="{" ".join(pts)}"/>'


def line_chart(kind: str, title: str, series: Sequence[dict], *, xlabel: str, ylabel: str,
               xlim: tuple[float, float] | None = None, ylim: tuple[float, float] | None = None,
               hlines: Sequence[tuple[float, str]] = (), points: bool = False, legend_at: str = "top-left",
               xticks: Sequence[tuple[float, str]] | None = None) -> Markup:
    """``series``: dicts with ``name``, ``x``, ``y`` and optional ``points`` (also draw dots) / ``dashed``."""
    xs = [v for s in series for v in s["x"] if v is not None and math.isfinite(v)]
    ys = [v for s in series for v in s["y"] if v is not None and math.isfinite(v)] + [v for v, _ in hlines]
    xlim = xlim or ((min(xs), max(xs)) if xs else (0.0, 1.0))
    ylim = ylim or ((min(0.0, min(ys)), max(ys) * 1.08 if ys and max(ys) > 0 else 1.0) if ys else (0.0, 1.0))
    fr = _Frame(xlim, ylim)
    body = fr.axes(xlabel, ylabel, xticks)
    for i, s in enumerate(series):
        pairs = [(x, y) for x, y in zip(s["x"], s["y"]) if x is not None and y is not None]
        body.append(_polyline(fr, [p[0] for p in pairs], [p[1] for p in pairs], s.get("cls", i),
                              dashed=s.get("dashed", False)))
        if points or s.get("points"):
            body += [f'<circle class="s{s.get("cls", i)} fill" cx="{_f(fr.x(x))}" cy="{_f(fr.y(y))}" r="4" '
                     f'data-x="{_num(x)}" data-y="{_num(y)}"/>' for x, y in pairs]
    for v, label in hlines:
        y = fr.y(v)
        body.append(f'<line class="ref" x1="{ML}" x2="{W - MR}" y1="{_f(y)}" y2="{_f(y)}" data-value="{_num(v)}"/>'
                    f'<text class="legend" x="{W - MR - 4}" y="{_f(y - 4)}" text-anchor="end">{escape(label)}</text>')
    desc = "; ".join(f"{s['name']}: " + ", ".join(f"({x:.3g}, {y:.3g})" for x, y in list(zip(s["x"], s["y"]))[:12]
                                                   if x is not None and y is not None) for s in series)
    return _svg(kind, title, desc, body, [(s.get("cls", i), s["name"]) for i, s in enumerate(series)],
                legend_at=legend_at)


def bar_chart(kind: str, title: str, bars: Sequence[tuple[str, float | None]], *, ylabel: str,
              ref: tuple[float, str] | None = None, ymax: float | None = None,
              errors: Sequence[tuple[float, float] | None] | None = None,
              classes: Sequence[str | None] | None = None) -> Markup:
    """Vertical bars (a missing value is drawn as 'n/a'); ``ref`` a horizontal reference line (the claim), named
    in a legend in the top margin where no bar can cover it; ``classes`` a CSS class per bar instead of the
    series colour (``bound-over``, ``bound-within``, ``estimate``)."""
    vals = [v for _, v in bars if v is not None and math.isfinite(v)]
    top = ymax if ymax is not None else max(vals + ([ref[0]] if ref else []) + [1e-9]) * 1.15
    fr = _Frame((0, max(len(bars), 1)), (0, top))
    ticks = [(i + 0.5, name) for i, (name, _) in enumerate(bars)]  # names may hold "\n" (two lines)
    body = fr.axes("", ylabel, ticks)
    for i, (name, v) in enumerate(bars):
        if v is None or not math.isfinite(v):
            body.append(f'<text class="tick" x="{_f(fr.x(i + 0.5))}" y="{_f(fr.y(0) - 6)}" text-anchor="middle">n/a</text>')
            continue
        x0, x1 = fr.x(i + 0.2), fr.x(i + 0.8)
        y = fr.y(min(v, top))
        cls = (classes[i] if classes and i < len(classes) else None) or f"s{i % 6} fill"
        body.append(f'<rect class="{cls} bar" x="{_f(x0)}" y="{_f(y)}" width="{_f(x1 - x0)}" '
                    f'height="{_f(max(fr.y(0) - y, 0.5))}" data-name="{escape(_oneline(name))}" data-value="{_num(v)}"/>'
                    f'<text class="tick" x="{_f((x0 + x1) / 2)}" y="{_f(y - 4)}" text-anchor="middle">{v:.3g}</text>')
        if errors and errors[i] is not None:
            lo, hi = errors[i]
            xm = (x0 + x1) / 2
            body.append(f'<line class="err" x1="{_f(xm)}" x2="{_f(xm)}" y1="{_f(fr.y(min(hi, top)))}" '
                        f'y2="{_f(fr.y(max(lo, 0)))}"/>')
    if ref is not None:
        y = fr.y(min(ref[0], top))
        # The line's name goes in the top margin, with a dashed swatch: above the plot, so no bar or bar
        # value can hide it, whatever the values.
        body.append(f'<line class="ref" x1="{ML}" x2="{W - MR}" y1="{_f(y)}" y2="{_f(y)}" data-value="{_num(ref[0])}"/>'
                    f'<line class="ref" x1="{W - MR - 150}" x2="{W - MR - 126}" y1="{MT - 5}" y2="{MT - 5}"/>'
                    f'<text class="legend ref-label" x="{W - MR - 122}" y="{MT - 1}">{escape(ref[1])}</text>')
    desc = "; ".join(f"{_oneline(n)}: {'n/a' if v is None else f'{v:.4g}'}" for n, v in bars)
    if ref is not None:
        desc += f"; {ref[1]}"
    return _svg(kind, title, desc, body)


def gauge(spent: float, budget: float, *, label: str = "epsilon spent") -> Markup:
    """A horizontal gauge of the composed epsilon spent against the budget."""
    frac = 0.0 if budget <= 0 else max(0.0, min(1.0, spent / budget))
    w, h = 560, 64
    cls = "ok" if frac < 0.75 else ("warn" if frac < 1.0 else "bad")
    return Markup(
        f'<svg class="gauge" data-chart="gauge" viewBox="0 0 {w} {h}" role="img" aria-labelledby="t-gauge d-gauge" '
        f'data-spent="{_num(spent)}" data-budget="{_num(budget)}" data-fraction="{_num(frac)}">'
        f'<title id="t-gauge">{escape(label)}</title>'
        f'<desc id="d-gauge">{spent:.4g} of {budget:.4g} ({100 * frac:.1f}%)</desc>'
        f'<rect class="gauge-bg" x="0" y="8" width="{w}" height="28" rx="6"/>'
        f'<rect class="gauge-fill {cls}" x="0" y="8" width="{_f(w * frac)}" height="28" rx="6"/>'
        f'<text class="label" x="0" y="56">0</text>'
        f'<text class="label" x="{w}" y="56" text-anchor="end">{budget:.4g}</text>'
        f'<text class="label" x="{_f(min(max(w * frac, 40), w - 40))}" y="56" text-anchor="middle">'
        f'{spent:.4g} ({100 * frac:.1f}%)</text></svg>')
