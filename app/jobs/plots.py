"""PNG plots for job artifacts (matplotlib's object API: no pyplot state). Drawn under
``app.audit.plots.DRAW_LOCK``: matplotlib's text layout is not thread-safe (see there)."""

from __future__ import annotations

import io
from collections.abc import Sequence

from app.audit.plots import DRAW_LOCK


def line_plot_png(
    xs: Sequence[float],
    ys: Sequence[float] | dict[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    hline: tuple[float, str] | None = None,
    marker: tuple[float, float, str] | None = None,
    logx: bool = False,
) -> bytes:
    with DRAW_LOCK:
        return _line_plot_png(xs, ys, xlabel=xlabel, ylabel=ylabel, title=title, hline=hline, marker=marker,
                              logx=logx)


def _line_plot_png(
    xs: Sequence[float],
    ys: Sequence[float] | dict[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    hline: tuple[float, str] | None,
    marker: tuple[float, float, str] | None,
    logx: bool,
) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    series = ys if isinstance(ys, dict) else {"": ys}
    for label, values in series.items():
        ax.plot(list(xs), list(values), label=label or None)
    if hline is not None:
        ax.axhline(hline[0], color="tab:red", linestyle="--", label=hline[1])
    if marker is not None:
        ax.plot([marker[0]], [marker[1]], "o", color="black", label=marker[2])
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if any(series) or hline or marker:
        ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
