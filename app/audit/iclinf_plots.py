"""PNG plots of ICLInf results (matplotlib's object API: no pyplot state, safe in worker threads)."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["figure6_png", "n_shots_png", "per_position_png"]


def _figure() -> tuple[Figure, Axes]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.2), dpi=100)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def _png(fig: Figure) -> bytes:
    from app.audit.plots import DRAW_LOCK  # matplotlib's text layout is not thread-safe (see there)

    buf = io.BytesIO()
    with DRAW_LOCK:
        fig.tight_layout()
        fig.savefig(buf, format="png")
    return buf.getvalue()


def per_position_png(series: Mapping[str, Sequence[float]], *, title: str = "ICLInf per removed position") -> bytes:
    """Grouped bars: mean loss of removing the exemplar at position 1..n (ICLInf RQ2, Figure 1)."""
    fig, ax = _figure()
    k = max(len(series), 1)
    width = 0.8 / k
    for j, (name, values) in enumerate(series.items()):
        xs = [i + 1 + (j - (k - 1) / 2) * width for i in range(len(values))]
        ax.bar(xs, [0.0 if v is None else v for v in values], width=width, label=name)
    ax.set_xlabel("position of the removed exemplar")
    ax.set_ylabel("mean max |delta log p|")
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    if series:
        ax.legend(fontsize=8)
    return _png(fig)


def n_shots_png(series: Mapping[str, tuple[Sequence[int], Sequence[float], Sequence[float]]],
                *, title: str = "ICLInf against n_shots") -> bytes:
    """ICLInf mean +- std against the number of exemplars (ICLInf RQ4, Figure 3)."""
    fig, ax = _figure()
    for name, (xs, mean, std) in series.items():
        ax.errorbar(list(xs), list(mean), yerr=list(std), marker="o", capsize=3, label=name)
    ax.set_xlabel("n_shots")
    ax.set_ylabel("ICLInf (mean +- std)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(fontsize=8)
    return _png(fig)


def figure6_png(cells: Sequence[Mapping[str, Any]], *, title: str = "ICLInf audit of clip-softmax decoding",
                paper_x2: bool = True) -> bytes:
    """ICLInf Figure 6: epsilon_theoretical (x) against epsilon_empirical (y), log-log, one series per delta,
    with y = x; the paper's doubled empirical value (Thm C.9) dashed."""
    fig, ax = _figure()
    deltas = sorted({c["delta"] for c in cells})
    lo, hi = float("inf"), 0.0
    for d in deltas:
        row = sorted((c for c in cells if c["delta"] == d), key=lambda c: c["epsilon_theoretical"])
        pts = [(c["epsilon_theoretical"], c["epsilon_empirical"]) for c in row
               if c["epsilon_theoretical"] > 0 and c["epsilon_empirical"] > 0]
        if not pts:
            continue
        xs, ys = zip(*pts)
        line = ax.plot(xs, ys, marker="o", label=f"delta={d:g}")[0]
        if paper_x2:
            ax.plot(xs, [2 * y for y in ys], linestyle="--", color=line.get_color(), alpha=0.5,
                    label=f"x2 (Thm C.9), delta={d:g}")
        lo, hi = min(lo, *xs, *ys), max(hi, *xs, *(2 * y for y in ys))
    if hi > 0:
        ax.plot([lo, hi], [lo, hi], color="grey", linestyle=":", label="y = x")
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("epsilon_theoretical")
    ax.set_ylabel("epsilon_empirical (ICLInf)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return _png(fig)
