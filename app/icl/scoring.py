"""Label distributions from continuation log-probabilities, with optional contextual calibration.

**Label scoring.** For a prompt x and labels y_1..y_K the model scores each
continuation ``label_prefix + y_k`` (teacher forced, all of its tokens:
``lm.continuation_logprobs``) and the distribution is renormalised over the
label set,

    p(y_k | x) = exp(l_k) / sum_j exp(l_j),   l_k = log P_LM(label_prefix + y_k | x),

i.e. the model's next-token distribution with non-label outputs masked out
and renormalised, as in ICLInf (Li, Flemings et al.) Section 4.1 ("masking out
non-label tokens and taking renormalization"). Multi-token labels use the
product of their token probabilities.

**Contextual calibration** (ICLInf Appendix B, after Zhao et al. 2021,
"Calibrate before use", Section 5): with ``p_cf`` the label distribution of the
*same* prompt (same template, same demonstrations) whose query is replaced by a
content-free input, ``W = diag((p_cf + eps)^-1)`` and the calibrated
distribution is ``W p`` renormalised. As in Zhao et al. we average ``p_cf`` over
the content-free inputs "N/A", "" and "[MASK]" and renormalise the average.
Calibration maps the content-free input itself to the uniform distribution and
divides out the label bias that the demonstrations (majority label, recency)
and the model's priors put on every query.

All prompts of a call (queries and their content-free twins, deduplicated) go
to the model in one batched ``continuation_logprobs`` call; or, when the model's class has it,
``relative_continuation_logprobs``: the same up to an additive constant per prompt, which the
renormalisation cancels (the ``hf`` backend then reads only the labels' rows of the LM head for
single-token labels: app/llm/passes.py). A delegating wrapper that overrides only
``continuation_logprobs`` (and forwards the rest by ``__getattr__``) keeps seeing every call: the
method is looked up on the class, not the instance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .templates import Exemplar, PromptTemplate, as_exemplar, get_template

CONTENT_FREE_INPUTS: tuple[str, ...] = ("N/A", "", "[MASK]")
"""Zhao et al. 2021 Section 5 (the inputs ICLInf Appendix B and Wu et al.'s DP-ICL use)."""

CALIBRATION_EPS = 1e-6
"""The small ``eps`` of ICLInf Appendix B, ``W = diag((p_cf + eps)^-1)``."""


@dataclass(frozen=True)
class ICLPrompt:
    """Demonstrations plus a query, rendered by a :class:`PromptTemplate` when scored."""

    exemplars: tuple[Exemplar, ...]
    query: str

    @classmethod
    def of(cls, exemplars: Sequence[Any], query: str) -> "ICLPrompt":
        if not isinstance(query, str):
            raise TypeError(f"query must be a string, got {type(query).__name__}")
        return cls(tuple(as_exemplar(e) for e in exemplars), query)

    def with_query(self, query: str) -> "ICLPrompt":
        return ICLPrompt(self.exemplars, query)


@dataclass(frozen=True)
class LabelScores:
    """What :func:`score_labels` computed, for one batch of prompts.

    ``probs``: the released distributions (B, K), calibrated when asked;
    ``uncalibrated``: the renormalised distributions before calibration;
    ``content_free``: the averaged content-free distributions ``p_cf`` (B, K), or None;
    ``logprobs``: the model's continuation scores (B, K), not renormalised: log-probabilities up to an
    additive constant per row (exact log-probabilities from a model without
    ``relative_continuation_logprobs``); only differences within a row mean anything;
    ``prompts``: the rendered prompt strings (B).
    """

    labels: tuple[str, ...]
    probs: np.ndarray
    uncalibrated: np.ndarray
    content_free: np.ndarray | None
    logprobs: np.ndarray
    prompts: tuple[str, ...]


def check_labels(labels: Sequence[str]) -> tuple[str, ...]:
    if isinstance(labels, str):
        raise TypeError("labels must be a sequence of strings, not one string")
    labs = tuple(labels)
    if len(labs) < 2:
        raise ValueError(f"need at least two labels, got {list(labs)}")
    for lab in labs:
        if not isinstance(lab, str) or not lab.strip():
            raise ValueError(f"labels must be non-empty strings, got {lab!r}")
    if len(set(labs)) != len(labs):
        raise ValueError(f"labels must be distinct, got {list(labs)}")
    return labs


def renormalize(logprobs: np.ndarray) -> np.ndarray:
    """Softmax over the last axis: continuation log-probs -> a distribution over the label set."""
    lp = np.asarray(logprobs, dtype=np.float64)
    z = lp - lp.max(axis=-1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=-1, keepdims=True)


def contextual_calibration(probs: np.ndarray, content_free_probs: np.ndarray, eps: float = CALIBRATION_EPS) -> np.ndarray:
    """ICLInf Appendix B: ``W p`` with ``W = diag((p_cf + eps)^-1)``, renormalised to sum to one.

    ``probs`` (..., K); ``content_free_probs`` broadcastable to it.
    """
    if eps < 0:
        raise ValueError("eps must be >= 0")
    p = np.asarray(probs, dtype=np.float64)
    cf = np.asarray(content_free_probs, dtype=np.float64)
    w = p / (cf + eps)
    return w / w.sum(axis=-1, keepdims=True)


def _render(lm: Any, template: PromptTemplate, prompt: ICLPrompt, labels: Sequence[str]) -> str:
    return template.render(prompt.exemplars, prompt.query, labels, lm=lm)


def score_labels(
    lm: Any,
    prompts: Sequence["ICLPrompt | str"],
    labels: Sequence[str],
    *,
    template: "PromptTemplate | str | None" = None,
    calibrate: bool = False,
    content_free: Sequence[str] = CONTENT_FREE_INPUTS,
    eps: float = CALIBRATION_EPS,
) -> LabelScores:
    """Label distributions for a batch of prompts, in one model call.

    ``prompts`` are :class:`ICLPrompt` (rendered with ``template``) or already
    rendered strings; calibration needs :class:`ICLPrompt` (it re-renders the
    prompt with content-free queries).
    """
    labs = check_labels(labels)
    tpl = get_template(template)
    if isinstance(prompts, (str, ICLPrompt)):
        raise TypeError("prompts must be a sequence of prompts")
    if calibrate and not content_free:
        raise ValueError("calibration needs at least one content-free input")
    rendered: list[str] = []
    cf_rendered: list[list[str]] = []
    for i, pr in enumerate(prompts):
        if isinstance(pr, str):
            if calibrate:
                raise ValueError(f"prompt {i} is a rendered string; calibration needs ICLPrompt(exemplars, query)")
            rendered.append(pr)
        elif isinstance(pr, ICLPrompt):
            rendered.append(_render(lm, tpl, pr, labs))
            if calibrate:
                cf_rendered.append([_render(lm, tpl, pr.with_query(c), labs) for c in content_free])
        else:
            raise TypeError(f"prompt {i} must be an ICLPrompt or a string, got {type(pr).__name__}")
    b = len(rendered)
    k = len(labs)
    if b == 0:
        empty = np.zeros((0, k))
        return LabelScores(labs, empty, empty, empty if calibrate else None, empty, ())

    # One batched call over the distinct prompt strings (content-free twins are
    # shared by every query that has the same demonstrations).
    unique: dict[str, int] = {}
    for s in rendered + [s for row in cf_rendered for s in row]:
        unique.setdefault(s, len(unique))
    method = "relative_continuation_logprobs"
    if getattr(type(lm), method, None) is None:  # the class, not a wrapper's __getattr__ (module doc)
        method = "continuation_logprobs"
    lp_all = np.asarray(getattr(lm, method)(list(unique), tpl.continuations(labs)), dtype=np.float64)
    if lp_all.shape != (len(unique), k):
        raise RuntimeError(f"{method} returned shape {lp_all.shape}, expected {(len(unique), k)}")
    if not np.all(np.isfinite(lp_all)):
        raise RuntimeError(f"{method} returned non-finite values")
    p_all = renormalize(lp_all)

    idx = np.array([unique[s] for s in rendered])
    logprobs = lp_all[idx]
    raw = p_all[idx]
    if not calibrate:
        return LabelScores(labs, raw, raw, None, logprobs, tuple(rendered))
    cf_idx = np.array([[unique[s] for s in row] for row in cf_rendered])  # (B, C)
    p_cf = p_all[cf_idx].mean(axis=1)  # Zhao et al.: average over the content-free inputs ...
    p_cf = p_cf / p_cf.sum(axis=-1, keepdims=True)  # ... and renormalise
    return LabelScores(labs, contextual_calibration(raw, p_cf, eps), raw, p_cf, logprobs, tuple(rendered))


def label_distribution(
    lm: Any,
    prompts: Sequence["ICLPrompt | str"],
    labels: Sequence[str],
    calibrate: bool = False,
    template: "PromptTemplate | str | None" = None,
    *,
    content_free: Sequence[str] = CONTENT_FREE_INPUTS,
    eps: float = CALIBRATION_EPS,
) -> np.ndarray:
    """(B, K) label probabilities (rows sum to one); see :func:`score_labels`."""
    return score_labels(lm, prompts, labels, template=template, calibrate=calibrate,
                        content_free=content_free, eps=eps).probs


def partition_label_distribution(
    lm: Any,
    exemplars: Sequence[Any],
    partitions: Sequence[Sequence[int]],
    query: str,
    labels: Sequence[str],
    template: "PromptTemplate | str | None" = None,
    calibrate: bool = False,
    **kwargs: Any,
) -> np.ndarray:
    """(T, K): one label distribution per partition of ``exemplars`` for ``query``, in one model call.

    ``partitions`` are index arrays (e.g. from :func:`app.icl.partition.partition_exemplars`);
    each partition's demonstrations appear in the order of its indices.
    """
    ex = [as_exemplar(e) for e in exemplars]
    prompts = [ICLPrompt(tuple(ex[int(i)] for i in part), query) for part in partitions]
    return label_distribution(lm, prompts, labels, calibrate=calibrate, template=template, **kwargs)
