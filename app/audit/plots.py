"""PNG plots of a campaign (matplotlib's object API: no pyplot state).

Drawing is not thread-safe even so: matplotlib's mathtext parser (log-scale tick labels such as 10^-5) is one
shared pyparsing object, and two audit jobs laying out figures at once made it raise ValueError (a burst of
epsilon jobs failed as internal errors). Every figure of the service is laid out and saved under ``DRAW_LOCK``
(here, app.audit.iclinf_plots, app.jobs.plots); that step takes ~0.1 s.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DRAW_LOCK = threading.Lock()


def _figure() -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    with DRAW_LOCK:
        fig.tight_layout()
        fig.savefig(buf, format="png")
    return buf.getvalue()


def roc_points(stat_with: np.ndarray, stat_without: np.ndarray, points: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, TPR) of the tests 'statistic > tau' over tau (descending)."""
    a = np.sort(np.asarray(stat_with, dtype=float))
    b = np.sort(np.asarray(stat_without, dtype=float))
    pooled = np.concatenate([a, b])
    taus = np.unique(np.quantile(pooled, np.linspace(0, 1, points)))[::-1]
    taus = np.concatenate([[np.inf], taus, [-np.inf]])
    tpr = (a.size - np.searchsorted(a, taus, side="right")) / a.size
    fpr = (b.size - np.searchsorted(b, taus, side="right")) / b.size
    return fpr, tpr


def roc_png(stat_with: np.ndarray, stat_without: np.ndarray, *, title: str, black_box_point: tuple[float, float] | None = None) -> bytes:
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    fpr, tpr = roc_points(stat_with, stat_without)
    ax.plot(fpr, tpr, label="white-box statistic")
    if black_box_point is not None:
        ax.plot([black_box_point[0]], [black_box_point[1]], "o", color="black", label="black-box (released label)")
    ax.plot([0, 1], [0, 1], "--", color="grey", linewidth=0.8, label="chance")
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    return _png(fig)


def histogram_png(stat_with: np.ndarray, stat_without: np.ndarray, *, title: str, threshold: float | None = None) -> bytes:
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    a = np.asarray(stat_with, dtype=float)
    b = np.asarray(stat_without, dtype=float)
    lo, hi = float(min(a.min(), b.min())), float(max(a.max(), b.max()))
    bins = np.linspace(lo, hi if hi > lo else lo + 1.0, 50).tolist()  # exact floats; the stub wants a Sequence
    ax.hist(b, bins=bins, alpha=0.55, density=True, label="without canary (C0)")
    ax.hist(a, bins=bins, alpha=0.55, density=True, label="with canary (C1)")
    if threshold is not None and np.isfinite(threshold):
        ax.axvline(threshold, color="tab:red", linestyle="--", label="threshold (held-out split)")
    ax.set_xlabel("noisy[positive] - noisy[negative]")
    ax.set_ylabel("density")
    ax.set_title(title)
    ax.legend()
    return _png(fig)


def convergence_png(rows: Sequence[dict[str, Any]], *, title: str, epsilon_theory: float | None) -> bytes:
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    rows = [r for r in rows if r.get("n_llm") == max(x.get("n_llm", 0) for x in rows)]
    xs = [r["n_sample"] for r in rows]
    for key, label in (("white_box_epsilon_gdp", "white-box GDP estimate"),
                       ("white_box_epsilon_lower", "white-box CP bound"),
                       ("black_box_epsilon_gdp", "black-box GDP estimate"),
                       ("black_box_epsilon_lower", "black-box CP bound")):
        ys = [r.get(key) for r in rows]
        if any(y is not None for y in ys):
            ax.plot(xs, [np.nan if y is None else y for y in ys], marker="o", label=label)
    if epsilon_theory is not None and np.isfinite(epsilon_theory):
        ax.axhline(epsilon_theory, color="tab:red", linestyle="--", label="epsilon_theory")
    ax.set_xscale("log")
    ax.set_xlabel("simulated trials per hypothesis (n_sample)")
    ax.set_ylabel("epsilon")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return _png(fig)
