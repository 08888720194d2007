"""ICLInf: data-dependent privacy leakage of in-context exemplars (Wen et al., ICLInf, Sections 3-4).

For m queries x'_j, each with its own n_shots exemplars S_j sampled without
replacement from the training pool (Section 4.1), ICLInf Eq. 4 is

    ICLInf^ = 1/m sum_j max_{(x,y) in S_j} max_{y' in V} | log Pr[A(S_j, x'_j) = y'] - log Pr[A(S_j \\ {(x,y)}, x'_j) = y'] |

where A is the model's label distribution (label words only, renormalised:
the default, Section 4.1) or its full next-token distribution (Appendix E.1),
optionally after contextual calibration (Appendix B). Before the outer max,
the loss of removing the exemplar at position i is reported per position
(RQ2, the U-shape); mean and standard deviation over queries (Section 4.1
"Metrics"); sweeps over n_shots (RQ4) reuse the same queries.

A query's n_shots + 1 prompts (and their content-free twins) are scored as one
family (:func:`app.audit.iclinf_forward.score_family`): each distinct token
position is computed once on the hf backend.

The decoding audit of Section 5 lives in :mod:`app.audit.iclinf_decoding`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from app.audit.iclinf_forward import FamilyScores, TrieCounts, score_family
from app.audit.iclinf_renyi import log_normalize, max_abs_log_ratio
from app.icl.scoring import CALIBRATION_EPS, CONTENT_FREE_INPUTS, check_labels
from app.icl.templates import Exemplar, PromptTemplate, as_exemplar, get_template

__all__ = [
    "ICLInfQuery",
    "ICLInfResult",
    "Variant",
    "family_distributions",
    "iclinf",
    "iclinf_query",
    "iclinf_sweep",
    "leave_one_out_losses",
    "query_distributions",
    "summarize",
]

Variant = Literal["label", "full"]
ProgressFn = Callable[[float, str], None]


# ---------------------------------------------------------------------------
# Arithmetic (no model)
# ---------------------------------------------------------------------------


def leave_one_out_losses(log_full: np.ndarray, log_loo: np.ndarray) -> np.ndarray:
    """Per removed exemplar i: max_y |log P(y | S) - log P(y | S \\ {i})| (ICLInf Eq. 4, inner max).

    ``log_full`` (K,) log-distribution with every exemplar, ``log_loo`` (n, K) with exemplar i removed.
    The query's loss is the max of the result (Eq. 4, max over exemplars)."""
    lf = np.asarray(log_full, dtype=np.float64)
    ll = np.asarray(log_loo, dtype=np.float64)
    if ll.ndim != 2 or lf.ndim != 1 or ll.shape[1] != lf.shape[0]:
        raise ValueError(f"shapes: log_full (K,), log_loo (n, K); got {lf.shape} and {ll.shape}")
    return max_abs_log_ratio(lf[None, :], ll)


def summarize(values: np.ndarray) -> tuple[float, float]:
    """(mean, sample standard deviation, ddof=1; 0 for one value) of finite-or-not values."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return float("nan"), float("nan")
    mean = float(v.mean())
    std = float(v.std(ddof=1)) if v.size > 1 else 0.0
    return mean, std


def _calibrated_log(probs: np.ndarray, cf_probs: np.ndarray, eps: float) -> np.ndarray:
    """ICLInf Appendix B: log of W p renormalised, W = diag((p_cf + eps)^-1); p_cf averaged over the
    content-free inputs and renormalised first (Zhao et al. 2021, as app.icl.scoring)."""
    cf = cf_probs.mean(axis=0)
    cf = cf / cf.sum()
    w = probs / (cf + eps)
    with np.errstate(divide="ignore"):
        return np.log(w / w.sum())


# ---------------------------------------------------------------------------
# One query
# ---------------------------------------------------------------------------


def _family_prompts(lm: Any, tpl: PromptTemplate, exemplars: Sequence[Exemplar], query: str,
                    labels: Sequence[str], calibrate: bool, content_free: Sequence[str]) -> tuple[list[str], int]:
    """Prompts of one query: S then S minus exemplar i (i = 1..n); with calibration each set is
    followed by its content-free twins. Returns (prompts, prompts per exemplar set)."""
    sets = [list(exemplars)] + [list(exemplars[:i]) + list(exemplars[i + 1:]) for i in range(len(exemplars))]
    per = 1 + (len(content_free) if calibrate else 0)
    out: list[str] = []
    for s in sets:
        out.append(tpl.render(s, query, labels, lm=lm))
        if calibrate:
            out.extend(tpl.render(s, c, labels, lm=lm) for c in content_free)
    return out, per


def family_distributions(
    lm: Any,
    items: Sequence[tuple[Sequence[Any], str]],
    labels: Sequence[str],
    template: PromptTemplate | str | None = None,
    *,
    variant: Variant = "label",
    calibrate: bool = False,
    content_free: Sequence[str] = CONTENT_FREE_INPUTS,
    eps: float = CALIBRATION_EPS,
    use_trie: bool | None = None,
) -> tuple[list[np.ndarray], TrieCounts]:
    """For each (exemplars, query): the (n+1, K or V) log-distributions, row 0 with every exemplar, row i
    without exemplar i. All prompts of all items go through one :func:`score_family` call."""
    labs = check_labels(labels)
    tpl = get_template(template)
    if variant not in ("label", "full"):
        raise ValueError(f"variant must be 'label' or 'full', got {variant!r}")
    if calibrate and not content_free:
        raise ValueError("calibration needs at least one content-free input")
    prompts: list[str] = []
    shapes: list[tuple[int, int]] = []
    for exemplars, query in items:
        ex = [as_exemplar(e) for e in exemplars]
        if not ex:
            raise ValueError("need at least one exemplar to leave out")
        ps, per = _family_prompts(lm, tpl, ex, query, labs, calibrate, content_free)
        prompts.extend(ps)
        shapes.append((len(ex) + 1, per))
    fam: FamilyScores = score_family(
        lm, prompts, tpl.continuations(labs) if variant == "label" else None, full=(variant == "full"),
        use_trie=use_trie,
    )
    if variant == "label":
        assert fam.label_logprobs is not None  # continuations were asked for
        logd_all = log_normalize(fam.label_logprobs)  # Section 4.1: non-label outputs masked, renormalised
    else:
        assert fam.next_logprobs is not None  # full=True was asked for
        logd_all = log_normalize(fam.next_logprobs)  # Appendix E.1: the full next-token distribution
    out, start = [], 0
    for sets, per in shapes:
        logd = logd_all[start:start + sets * per].reshape(sets, per, -1)
        start += sets * per
        if not calibrate:
            out.append(logd[:, 0])
            continue
        probs = np.exp(logd)
        out.append(np.stack([_calibrated_log(probs[j, 0], probs[j, 1:], eps) for j in range(sets)]))
    return out, fam.counts


def query_distributions(
    lm: Any,
    exemplars: Sequence[Any],
    query: str,
    labels: Sequence[str],
    template: PromptTemplate | str | None = None,
    **kwargs: Any,
) -> tuple[np.ndarray, TrieCounts]:
    """(n+1, K or V) log-distributions of one query (one family call); see :func:`family_distributions`."""
    (logd,), counts = family_distributions(lm, [(exemplars, query)], labels, template, **kwargs)
    return logd, counts


@dataclass(frozen=True)
class ICLInfQuery:
    """One query of Eq. 4: its exemplars (indices into the pool when sampled), per-position losses
    (position i = exemplar i removed, prompt order), the max, and the prediction with all exemplars."""

    query_index: int | None
    exemplar_indices: tuple[int, ...] | None
    per_position: tuple[float, ...]
    loss: float
    argmax_position: int
    predicted: str | None
    label: str | None

    @property
    def correct(self) -> bool | None:
        return None if self.label is None or self.predicted is None else self.predicted == self.label


def iclinf_query(
    lm: Any,
    exemplars: Sequence[Any],
    query: str,
    labels: Sequence[str],
    template: PromptTemplate | str | None = None,
    *,
    variant: Variant = "label",
    calibrate: bool = False,
    content_free: Sequence[str] = CONTENT_FREE_INPUTS,
    eps: float = CALIBRATION_EPS,
    query_label: str | None = None,
    use_trie: bool | None = None,
    query_index: int | None = None,
    exemplar_indices: Sequence[int] | None = None,
    counts: TrieCounts | None = None,
) -> ICLInfQuery:
    """ICLInf Eq. 4 for one query and one exemplar set (the term inside the mean)."""
    labs = check_labels(labels)
    logd, c = query_distributions(lm, exemplars, query, labs, template, variant=variant, calibrate=calibrate,
                                  content_free=content_free, eps=eps, use_trie=use_trie)
    if counts is not None:
        counts.add(c)
    return _query_result(logd, labs, variant, query_label, query_index, exemplar_indices)


def _query_result(logd: np.ndarray, labs: Sequence[str], variant: str, query_label: str | None,
                  query_index: int | None, exemplar_indices: Sequence[int] | None) -> ICLInfQuery:
    per = leave_one_out_losses(logd[0], logd[1:])
    i = int(np.argmax(per))
    predicted = labs[int(np.argmax(logd[0]))] if variant == "label" else None
    return ICLInfQuery(
        query_index, None if exemplar_indices is None else tuple(int(x) for x in exemplar_indices),
        tuple(float(x) for x in per), float(per[i]), i, predicted, query_label,
    )


# ---------------------------------------------------------------------------
# m queries
# ---------------------------------------------------------------------------


@dataclass
class ICLInfResult:
    """ICLInf^ over m queries for one model, one n_shots and one variant."""

    model: str
    n_shots: int
    m: int
    variant: str
    calibrate: bool
    mean: float
    std: float
    per_position_mean: list[float]
    per_position_std: list[float]
    accuracy: float | None
    queries: list[ICLInfQuery]
    counts: dict[str, Any]
    seconds: float
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, *, queries: bool = False) -> dict[str, Any]:
        d = {
            "model": self.model,
            "n_shots": self.n_shots,
            "m": self.m,
            "variant": self.variant,
            "calibrate": self.calibrate,
            "iclinf_mean": _finite(self.mean),
            "iclinf_std": _finite(self.std),
            "per_position_mean": [_finite(x) for x in self.per_position_mean],
            "per_position_std": [_finite(x) for x in self.per_position_std],
            "accuracy": self.accuracy,
            "counts": dict(self.counts),
            "seconds": self.seconds,
            "queries_per_second": (self.m / self.seconds) if self.seconds > 0 else None,
            "seed": self.seed,
            **self.extra,
        }
        if queries:
            d["queries"] = [
                {"query_index": q.query_index, "exemplar_indices": list(q.exemplar_indices or ()),
                 "per_position": [_finite(x) for x in q.per_position], "loss": _finite(q.loss),
                 "argmax_position": q.argmax_position, "predicted": q.predicted, "label": q.label}
                for q in self.queries
            ]
        return d


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def iclinf(
    lm: Any,
    train: Sequence[Any],
    test: Sequence[Any],
    labels: Sequence[str],
    template: PromptTemplate | str | None = None,
    *,
    n_shots: int = 4,
    m: int = 100,
    variant: Variant = "label",
    calibrate: bool = False,
    seed: int | None = 0,
    rng: np.random.Generator | None = None,
    query_indices: Sequence[int] | None = None,
    content_free: Sequence[str] = CONTENT_FREE_INPUTS,
    eps: float = CALIBRATION_EPS,
    use_trie: bool | None = None,
    queries_per_call: int = 1,
    progress: ProgressFn | None = None,
) -> ICLInfResult:
    """ICLInf^ (Eq. 4): m test queries, each with n_shots exemplars drawn without replacement from
    ``train`` independently per query (Section 4.1); mean and std over queries, per-position means.

    ``train``/``test``: (input, label) pairs (or ``Example``s). Queries are ``query_indices`` or m
    distinct test items drawn with the generator. Randomness: ``rng``, else ``default_rng(seed)``.
    ``queries_per_call``: queries whose prompt families share one model call (1: a query's n_shots + 1
    prompts per call; more fills bigger batches, same numbers).
    """
    labs = check_labels(labels)
    tpl = get_template(template)
    pool = [as_exemplar(e) for e in train]
    tests = [as_exemplar(e) for e in test]
    if n_shots < 1:
        raise ValueError("n_shots must be >= 1")
    if n_shots > len(pool):
        raise ValueError(f"n_shots = {n_shots} exemplars need a pool of at least that many, got {len(pool)}")
    g = rng if rng is not None else np.random.default_rng(seed)
    if query_indices is None:
        if not 1 <= m <= len(tests):
            raise ValueError(f"m must be in [1, {len(tests)}] (the number of test queries), got {m}")
        query_indices = [int(i) for i in g.choice(len(tests), size=m, replace=False)]
    qidx = list(query_indices)
    counts = TrieCounts()
    results: list[ICLInfQuery] = []
    t0 = time.perf_counter()
    draws = [[int(i) for i in g.choice(len(pool), size=n_shots, replace=False)] for _ in qidx]
    step = max(1, int(queries_per_call))
    for a in range(0, len(qidx), step):
        group = list(range(a, min(a + step, len(qidx))))
        logds, c = family_distributions(
            lm, [([pool[i] for i in draws[j]], tests[qidx[j]][0]) for j in group], labs, tpl, variant=variant,
            calibrate=calibrate, content_free=content_free, eps=eps, use_trie=use_trie)
        counts.add(c)
        for j, logd in zip(group, logds):
            lab = tests[qidx[j]][1]
            results.append(_query_result(logd, labs, variant, lab if lab in labs else None, qidx[j], draws[j]))
        if progress is not None:
            progress(len(results) / len(qidx), f"n_shots={n_shots}: query {len(results)} of {len(qidx)}")
    seconds = time.perf_counter() - t0
    losses = np.array([q.loss for q in results])
    per = np.array([q.per_position for q in results])  # (m, n_shots)
    mean, std = summarize(losses)
    pos_mean = [summarize(per[:, i])[0] for i in range(n_shots)]
    pos_std = [summarize(per[:, i])[1] for i in range(n_shots)]
    judged = [q.correct for q in results if q.correct is not None]
    acc = (sum(judged) / len(judged)) if judged and variant == "label" else None
    return ICLInfResult(
        model=getattr(lm, "name", type(lm).__name__), n_shots=n_shots, m=len(qidx), variant=variant,
        calibrate=calibrate, mean=mean, std=std, per_position_mean=pos_mean, per_position_std=pos_std,
        accuracy=acc, queries=results, counts=counts.to_dict(), seconds=seconds, seed=seed if rng is None else None,
    )


def iclinf_sweep(
    lm: Any,
    train: Sequence[Any],
    test: Sequence[Any],
    labels: Sequence[str],
    template: PromptTemplate | str | None = None,
    *,
    n_shots: Sequence[int] = (1, 2, 4, 8),
    m: int = 100,
    variant: Variant = "label",
    calibrate: bool = False,
    seed: int = 0,
    progress: ProgressFn | None = None,
    **kwargs: Any,
) -> list[ICLInfResult]:
    """ICLInf^ for each n_shots (RQ4) on the same m queries; exemplar draws seeded per n_shots."""
    tests = list(test)
    if not 1 <= m <= len(tests):
        raise ValueError(f"m must be in [1, {len(tests)}] (the number of test queries), got {m}")
    qidx = [int(i) for i in np.random.default_rng([seed, 0]).choice(len(tests), size=m, replace=False)]
    out = []
    shots = list(n_shots)
    for k, n in enumerate(shots):
        def prog(f: float, msg: str, k: int = k) -> None:
            if progress is not None:
                progress((k + f) / len(shots), msg)

        r = iclinf(lm, train, tests, labels, template, n_shots=int(n), m=m, variant=variant, calibrate=calibrate,
                   rng=np.random.default_rng([seed, 1, int(n)]), query_indices=qidx, progress=prog, **kwargs)
        r.seed = seed
        out.append(r)
    return out
