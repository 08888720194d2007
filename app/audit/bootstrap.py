"""Bootstrap auditing (tight-auditing paper, Section 3.5, Algorithm 1).

Collect ``n_llm`` clean vote vectors per hypothesis from the real system (the
non-private M', lines 1-3), then draw ``n_sample`` per hypothesis by resampling
them with replacement and adding the mechanism's own noise (lines 5-7), all in
one vectorised draw; count TP/FP (lines 8-9) and compute the estimates
(line 10). The model is called 2 x n_llm times instead of the
trials x 2 x partitions prompts of running every trial (the paper's example:
400,000 x 2 x 10 = 8 million).

What the numbers mean: the Clopper-Pearson bound is rigorous for the
*simulated* mechanism (this noise on the empirical vote distribution), which is
the deployed one only if the noise code is the deployed code and the n_llm
votes represent the model; bootstrap spread is not a confidence interval.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.audit.estimates import (
    Estimates,
    estimates_from_counts,
    margin_statistic,
    select_threshold,
)
from app.audit.noise import VotingNoise

DEFAULT_N_SAMPLE = 400_000
# n_sample x labels: the draws are held as float arrays, ~46 bytes per cell at peak (measured: 2e7 cells, +919
# MiB). 2**26 cells is ~3 GiB; n_sample 4,000,000 with 1,000 labels (simulated votes of that length) would have
# asked for ~180 GB and the kernel's OOM killer would have ended the server that runs the job.
MAX_BOOTSTRAP_CELLS = 2**26


def check_bootstrap_size(n_sample: int, labels: int) -> None:
    """ValueError naming n_sample when n_sample x labels is over MAX_BOOTSTRAP_CELLS."""
    if n_sample * labels > MAX_BOOTSTRAP_CELLS:
        raise ValueError(f"n_sample: {n_sample} draws x {labels} labels = {n_sample * labels} is over "
                         f"{MAX_BOOTSTRAP_CELLS} (the bootstrap's memory); draw fewer")


@dataclass
class BootstrapResult:
    n_llm: int
    n_sample: int
    estimates: dict[str, Estimates]
    convergence: list[dict[str, Any]]  # estimates at growing n_sample (nested prefixes) and n_llm
    seconds: float
    statistic_with: np.ndarray | None = None  # a sample of the white-box statistic, for plots
    statistic_without: np.ndarray | None = None
    assumptions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"n_llm": self.n_llm, "n_sample": self.n_sample, "seconds": self.seconds,
                "estimates": {k: v.to_dict() for k, v in self.estimates.items()},
                "convergence": self.convergence, "assumptions": self.assumptions}


def _resample(votes: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    return votes[rng.integers(0, votes.shape[0], size=n)]  # Sample(V), Algorithm 1 line 5


def _counts_black(released_in: np.ndarray, released_out: np.ndarray, pos: int) -> tuple[int, int, int, int]:
    tp = int(np.count_nonzero(released_in == pos))
    fp = int(np.count_nonzero(released_out == pos))
    return tp, released_in.size - tp, fp, released_out.size - fp


def _counts_white(s_in: np.ndarray, s_out: np.ndarray, tau: float) -> tuple[int, int, int, int]:
    tp = int(np.count_nonzero(s_in > tau))
    fp = int(np.count_nonzero(s_out > tau))
    return tp, s_in.size - tp, fp, s_out.size - fp


def bootstrap_audit(
    votes_with: Sequence[Sequence[float]] | np.ndarray,
    votes_without: Sequence[Sequence[float]] | np.ndarray,
    noise: VotingNoise,
    positive: int,
    negative: int | None,
    *,
    rng: np.random.Generator,
    n_sample: int = DEFAULT_N_SAMPLE,
    threat_models: Sequence[str] = ("black-box", "white-box"),
    confidence: float = 0.95,
    delta: float | None = None,
    epsilon_theory: float | None = None,
    threshold_fraction: float = 0.5,
    objective: str = "mu",
    convergence: bool = True,
    keep_statistic: int = 20_000,
    statistic: str = "margin",
) -> BootstrapResult:
    """Algorithm 1. White-box: the threshold is chosen on the first ``threshold_fraction`` of each
    hypothesis' draws and the counts come from the rest (fresh draws, so the bound keeps its
    confidence for the simulated mechanism). ``objective`` 'mu' follows the paper (maximise the GDP
    mu lower bound); 'epsilon' maximises the Clopper-Pearson epsilon bound."""
    t0 = time.perf_counter()
    vw = np.atleast_2d(np.asarray(votes_with, dtype=float))
    vo = np.atleast_2d(np.asarray(votes_without, dtype=float))
    if vw.shape[1] != vo.shape[1]:
        raise ValueError("vote vectors with and without the canary must have the same labels")
    if n_sample < 4:
        raise ValueError("n_sample must be >= 4")
    check_bootstrap_size(n_sample, vw.shape[1])
    d = noise.delta if delta is None else float(delta)
    eps_theory = noise.epsilon if epsilon_theory is None else epsilon_theory
    # Lines 6-7: H_with, H_without.
    h_in = noise.sample(_resample(vw, n_sample, rng), rng)
    h_out = noise.sample(_resample(vo, n_sample, rng), rng)
    gauss = noise.kind == "gaussian" and not noise.winner_only
    est: dict[str, Estimates] = {}
    conv: list[dict[str, Any]] = []
    sizes = _sizes(n_sample) if convergence else [n_sample]
    rel_in: np.ndarray | None = None
    rel_out: np.ndarray | None = None
    s_in: np.ndarray | None = None
    s_out: np.ndarray | None = None
    tau: float | None = None
    k = 0
    if "black-box" in threat_models:
        rel_in, rel_out = np.argmax(h_in, axis=1), np.argmax(h_out, axis=1)
        est["black-box"] = estimates_from_counts(
            *_counts_black(rel_in, rel_out, positive), threat_model="black-box", confidence=confidence, delta=d,
            epsilon_theory=eps_theory, gdp_applicable=gauss and vw.shape[1] == 2,
            assumptions=["bootstrap: the target's noise re-applied to resampled clean votes"])
    if "white-box" in threat_models:
        s_in = margin_statistic(h_in, positive, negative, statistic)
        s_out = margin_statistic(h_out, positive, negative, statistic)
        k = max(1, min(n_sample - 1, int(round(n_sample * threshold_fraction))))
        tau = select_threshold(s_in[:k], s_out[:k], confidence=confidence, delta=d, objective=objective)
        est["white-box"] = estimates_from_counts(
            *_counts_white(s_in[k:], s_out[k:], tau), threat_model="white-box", confidence=confidence, delta=d,
            epsilon_theory=eps_theory, gdp_applicable=gauss, threshold=tau, selection_trials=2 * k,
            assumptions=["bootstrap: the target's noise re-applied to resampled clean votes"])
    for m in sizes:
        row: dict[str, Any] = {"n_sample": m, "n_llm": vw.shape[0] + vo.shape[0]}
        if rel_in is not None and rel_out is not None:
            e = estimates_from_counts(*_counts_black(rel_in[:m], rel_out[:m], positive), threat_model="black-box",
                                      confidence=confidence, delta=d, epsilon_theory=eps_theory, gdp_applicable=False)
            row["black_box_epsilon_lower"] = e.epsilon_lower
            row["black_box_epsilon_gdp"] = e.epsilon_gdp
        if s_in is not None and s_out is not None and tau is not None:
            # tau from the selection draws; counted on the first m of the held-out draws.
            mm = min(m, n_sample - k)
            e = estimates_from_counts(*_counts_white(s_in[k:k + mm], s_out[k:k + mm], tau), threat_model="white-box",
                                      confidence=confidence, delta=d, epsilon_theory=eps_theory, gdp_applicable=gauss)
            row["white_box_epsilon_lower"] = e.epsilon_lower
            row["white_box_epsilon_gdp"] = e.epsilon_gdp
            row["white_box_counted_per_hypothesis"] = mm
        conv.append(row)
    if convergence and vw.shape[0] >= 4 and vo.shape[0] >= 4:
        conv.extend(_llm_convergence(vw, vo, noise, positive, negative, rng, min(n_sample, 100_000),
                                     threat_models, confidence, d, eps_theory, threshold_fraction, objective,
                                     statistic))
    keep = min(keep_statistic, n_sample)
    return BootstrapResult(
        vw.shape[0] + vo.shape[0], n_sample, est, conv, time.perf_counter() - t0,
        None if s_in is None else s_in[:keep].copy(), None if s_out is None else s_out[:keep].copy(),
        ["the Clopper-Pearson bound holds for the simulated mechanism (this noise on the empirical vote "
         "distribution); bootstrap spread is not a confidence interval"],
    )


def _sizes(n: int) -> list[int]:
    out: list[int] = []
    m = 1000
    while m < n:
        out.append(m)
        m *= 4
    out.append(n)
    return out


def _llm_convergence(vw: np.ndarray, vo: np.ndarray, noise: VotingNoise, pos: int, neg: int | None,
                     rng: np.random.Generator, n_sample: int, threat_models: Sequence[str], confidence: float,
                     delta: float, eps_theory: float | None, fraction: float, objective: str,
                     statistic: str) -> list[dict[str, Any]]:
    """The estimate when only the first m clean vectors per hypothesis had been collected
    (tight-auditing Figure 9)."""
    rows: list[dict[str, Any]] = []
    n = min(vw.shape[0], vo.shape[0])
    ms = sorted({max(2, n // 8), max(2, n // 4), max(2, n // 2)} - {n})
    for m in ms:
        r = bootstrap_audit(vw[:m], vo[:m], noise, pos, neg, rng=rng, n_sample=n_sample, threat_models=threat_models,
                            confidence=confidence, delta=delta, epsilon_theory=eps_theory,
                            threshold_fraction=fraction, objective=objective, convergence=False, keep_statistic=0,
                            statistic=statistic)
        row: dict[str, Any] = {"n_sample": n_sample, "n_llm": 2 * m}
        for tm, e in r.estimates.items():
            key = tm.replace("-", "_")
            row[f"{key}_epsilon_lower"] = e.epsilon_lower
            row[f"{key}_epsilon_gdp"] = e.epsilon_gdp
        rows.append(row)
    return rows


def gdp_epsilon_of(noise: VotingNoise, delta: float) -> float:
    """epsilon_theory of Gaussian voting where one vote moves (mu = sqrt2 / sigma); for checks."""
    from app.privacy.gdp import gdp_epsilon

    return gdp_epsilon(math.sqrt(2.0) / noise.applied_scale, delta)
