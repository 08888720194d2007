"""Bootstrap auditing for ESA (tight-auditing paper, Section 3.5, Algorithm 1, with clean mean
embeddings in place of clean vote vectors).

Lines 1-3: ``n_llm`` noise-free calls per hypothesis give clean means c_i (and each call's
zero-shot candidate embeddings, public). Lines 5-7: resample a call's clean mean and,
independently, a candidate set from all 2 x n_llm calls (the candidates never see the
context), add ESA's own noise N(0, sigma^2 I_d), decide; ``n_sample`` draws per hypothesis.

Exact low-dimensional sampling. Every statistic depends on the noise z only through
||c + z - p||^2 for a few points p (signals, candidates) and through z . v (reference
vector). With Q an orthonormal basis of the span of {c - p} and v (r <= 2 + candidates
dimensions), z = sigma (Q g + z_perp) with g ~ N(0, I_r) and ||z_perp||^2 ~ sigma^2
chi^2_{d-r} independent of g, so

    ||c + z - p||^2 = ||c - p||^2 - 2 sigma g . Q^T(p - c) + sigma^2 (||g||^2 + chi^2_{d-r})

is drawn exactly from r + 1 numbers instead of d = 384 (``test_reduction_is_exact`` checks
it against full-dimensional draws).

Decisions (the campaign's, ``app.audit.gen_queries``): black-box = the released candidate
(the one nearest the noisy mean) is nearer y1 than y0 (``signal``), or its similarity
score to the canary's second half (``similarity``, thresholded); white-box = d0 - d1 of the
noisy mean (``margin``), minus its distance to the reference text (``similarity``), or its
projection on the reference vector v = mean(c | with) - mean(c | without) (Choi et al.;
ContextLeak A.4; taken from the clean means, i.e. before any counted draw).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.audit.bootstrap import BootstrapResult, _counts_white, _sizes
from app.audit.estimates import Estimates, estimates_from_counts, select_threshold

GEN_STATISTICS = ("margin", "reference_vector")


def _basis(c: np.ndarray, points: np.ndarray, v: np.ndarray | None) -> np.ndarray:
    cols = [(p - c) for p in points]
    if v is not None:
        cols.append(v)
    a = np.stack(cols, axis=1)  # (d, k)
    q, r = np.linalg.qr(a)
    keep = np.abs(np.diag(r)) > 1e-12 * max(1.0, float(np.abs(r).max()))
    return q[:, keep]


def sample_sq_distances(c: np.ndarray, points: np.ndarray, sigma: float, n: int, rng: np.random.Generator,
                        v: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """(n, len(points)) squared distances ||c + z - p||^2 with z ~ N(0, sigma^2 I_d), and (n,)
    projections (c + z) . v, drawn exactly through the r-dimensional reduction."""
    d = c.size
    q = _basis(c, points, v)
    r = q.shape[1]
    g = rng.standard_normal((n, r))
    rest = rng.chisquare(d - r, size=n) if d > r else np.zeros(n)
    base = np.sum((points - c[None, :]) ** 2, axis=1)  # ||c - p||^2
    a = (points - c[None, :]) @ q  # (k, r) = Q^T (p - c)
    sq = base[None, :] - 2.0 * sigma * (g @ a.T) + (sigma ** 2) * (np.sum(g * g, axis=1) + rest)[:, None]
    proj = None if v is None else float(c @ v) + sigma * (g @ (q.T @ v))
    return np.maximum(sq, 0.0), proj


def _simulate(draws: Sequence[Any], pool: Sequence[np.ndarray], signals: np.ndarray, decision: str, sigma: float,
              n: int, rng: np.random.Generator, v: np.ndarray | None) -> dict[str, np.ndarray]:
    """n draws: resample a clean call (Algorithm 1 line 5) and, independently, a candidate set from
    the pool of every call (ESA draws its zero-shot candidates without the context, so they are
    the same distribution under both hypotheses; pairing them with their own call would turn the
    sampling noise of a few sets into a spurious difference), add noise, compute every statistic."""
    which = rng.integers(0, len(draws), size=n)
    cset = rng.integers(0, len(pool), size=n)
    out = {"bb": np.empty(n), "wb_margin": np.empty(n), "wb_ref": np.empty(n)}
    ns = signals.shape[0]
    cand_scores = []
    for cands in pool:
        if decision == "similarity":
            cand_scores.append(-np.linalg.norm(cands - signals[0][None, :], axis=1))
        else:
            dc = np.linalg.norm(cands[:, None, :] - signals[None, :, :], axis=2)
            cand_scores.append((dc[:, 0] < dc[:, 1]).astype(float))  # the candidate says y1
    key = which.astype(np.int64) * len(pool) + cset
    for k in np.unique(key):
        rows = np.nonzero(key == k)[0]
        i, j = divmod(int(k), len(pool))
        c = draws[i].clean_mean
        pts = np.vstack([signals, pool[j]])
        sq, proj = sample_sq_distances(c, pts, sigma, rows.size, rng, v)
        dist = np.sqrt(sq[:, :ns])
        out["wb_margin"][rows] = -dist[:, 0] if decision == "similarity" else dist[:, 1] - dist[:, 0]
        chosen = np.argmin(sq[:, ns:], axis=1)  # ESA releases the candidate nearest the noisy mean
        out["bb"][rows] = cand_scores[j][chosen]
        out["wb_ref"][rows] = proj if proj is not None else np.nan
    return out


def _thresholded(s_in: np.ndarray, s_out: np.ndarray, k: int, confidence: float, delta: float,
                 objective: str) -> tuple[np.ndarray, np.ndarray, float, int]:
    """tau chosen on the first k draws of each hypothesis; the decision counts the draws after them."""
    tau = select_threshold(s_in[:k], s_out[:k], confidence=confidence, delta=delta, objective=objective)
    return s_in, s_out, tau, k


def esa_bootstrap(
    draws_with: Sequence[Any],
    draws_without: Sequence[Any],
    signals: np.ndarray,
    decision: str,
    *,
    rng: np.random.Generator,
    n_sample: int = 400_000,
    threat_models: Sequence[str] = ("black-box", "white-box"),
    statistic: str = "margin",
    confidence: float = 0.95,
    delta: float = 1e-5,
    epsilon_theory: float | None = None,
    threshold_fraction: float = 0.5,
    objective: str = "epsilon",
    convergence: bool = True,
) -> BootstrapResult:
    """Algorithm 1 for ESA. ``signals``: (2, d) embeddings of (y1, y0), or (1, d) of the repeat
    attack's reference text. Thresholds (white-box; black-box ``similarity``) are chosen on the
    first ``threshold_fraction`` of the draws and counted on the rest."""
    t0 = time.perf_counter()
    if statistic not in GEN_STATISTICS:
        raise ValueError(f"statistic must be one of {GEN_STATISTICS} for a generation bootstrap")
    if not draws_with or not draws_without:
        raise ValueError("the bootstrap needs clean draws under both hypotheses")
    sigmas = {round(float(dr.sigma), 12) for dr in (*draws_with, *draws_without)}
    if len(sigmas) != 1:
        raise ValueError(f"the calls used different noise scales {sorted(sigmas)}")
    sigma = float(draws_with[0].sigma)
    sig = np.atleast_2d(np.asarray(signals, dtype=float))
    v = None
    if statistic == "reference_vector":
        v = (np.mean([dr.clean_mean for dr in draws_with], axis=0)
             - np.mean([dr.clean_mean for dr in draws_without], axis=0))
        if not np.any(v):
            v = None  # no clean difference at all: the projection carries no signal
    pool = [np.atleast_2d(np.asarray(dr.candidates, dtype=float)) for dr in (*draws_with, *draws_without)]
    h_in = _simulate(draws_with, pool, sig, decision, sigma, n_sample, rng, v)
    h_out = _simulate(draws_without, pool, sig, decision, sigma, n_sample, rng, v)
    k = max(1, min(n_sample - 1, int(round(n_sample * threshold_fraction))))
    note = ["bootstrap: ESA's Gaussian noise re-applied to resampled clean means (exact reduction to the span "
            "of the decision points)"]
    # threat model -> (statistic with, statistic without, tau, first counted draw); member iff > tau.
    decisions: dict[str, tuple[np.ndarray, np.ndarray, float, int]] = {}
    if "black-box" in threat_models:
        if decision == "similarity":
            decisions["black-box"] = _thresholded(h_in["bb"], h_out["bb"], k, confidence, delta, objective)
        else:  # the released candidate says y1 (1.0) or not (0.0): no threshold to choose, every draw counts
            decisions["black-box"] = (h_in["bb"], h_out["bb"], 0.5, 0)
    if "white-box" in threat_models:
        key = "wb_ref" if statistic == "reference_vector" else "wb_margin"
        s_in, s_out = h_in[key], h_out[key]
        if np.isnan(s_in).any():  # no reference direction: a constant statistic
            s_in, s_out = np.zeros(n_sample), np.zeros(n_sample)
        decisions["white-box"] = _thresholded(s_in, s_out, k, confidence, delta, objective)
    est: dict[str, Estimates] = {}
    for tm, (a_in, a_out, tau, start) in decisions.items():
        white = tm == "white-box"
        # The projection on a fixed v is Gaussian with the same variance under both hypotheses.
        est[tm] = estimates_from_counts(
            *_counts_white(a_in[start:], a_out[start:], tau), threat_model=tm, confidence=confidence, delta=delta,
            epsilon_theory=epsilon_theory, gdp_applicable=white and statistic == "reference_vector",
            threshold=tau if start else None, selection_trials=2 * start,
            assumptions=note + ([f"statistic: {statistic}"] if white else []))
    conv: list[dict[str, Any]] = []
    if convergence:
        for m in _sizes(n_sample):
            row: dict[str, Any] = {"n_sample": m, "n_llm": len(draws_with) + len(draws_without)}
            for tm, (a_in, a_out, tau, start) in decisions.items():
                mm = min(m, n_sample - start)  # tau from the selection draws; counted on the first mm after them
                e = estimates_from_counts(*_counts_white(a_in[start:start + mm], a_out[start:start + mm], tau),
                                          threat_model=tm, confidence=confidence, delta=delta,
                                          epsilon_theory=epsilon_theory, gdp_applicable=False)
                key = tm.replace("-", "_")
                row[f"{key}_epsilon_lower"] = e.epsilon_lower
                if tm == "white-box":
                    row[f"{key}_epsilon_gdp"] = e.epsilon_gdp
            conv.append(row)
    n = min(len(draws_with), len(draws_without))
    if convergence and n >= 4:
        # The estimate had only the first m clean calls per hypothesis been made (tight-auditing Fig. 17).
        for m in sorted({max(2, n // 4), max(2, n // 2)} - {n}):
            r = esa_bootstrap(draws_with[:m], draws_without[:m], signals, decision, rng=rng,
                              n_sample=min(n_sample, 100_000), threat_models=threat_models, statistic=statistic,
                              confidence=confidence, delta=delta, epsilon_theory=epsilon_theory,
                              threshold_fraction=threshold_fraction, objective=objective, convergence=False)
            row = {"n_sample": r.n_sample, "n_llm": 2 * m}
            for tm, e in r.estimates.items():
                row[f"{tm.replace('-', '_')}_epsilon_lower"] = e.epsilon_lower
                row[f"{tm.replace('-', '_')}_epsilon_gdp"] = e.epsilon_gdp
            conv.append(row)
    keep = min(20_000, n_sample)
    wb = decisions.get("white-box")
    return BootstrapResult(
        len(draws_with) + len(draws_without), n_sample, est, conv, time.perf_counter() - t0,
        None if wb is None else wb[0][:keep].copy(), None if wb is None else wb[1][:keep].copy(),
        ["the Clopper-Pearson bound holds for the simulated mechanism (ESA's noise on the empirical distribution "
         "of clean means and candidates); bootstrap spread is not a confidence interval"],
    )
