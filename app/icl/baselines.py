"""Non-private utility baselines: ``zero_shot`` (no exemplars) and ``icl`` (all exemplars in one prompt).

They bracket every DP-ICL mechanism: a private answer worth its budget beats
zero-shot (which spends none), and can at best match non-private ICL.
Both consume no privacy budget only in the sense that zero-shot reads no
private data; ``icl`` reads all of it with no protection at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .scoring import CONTENT_FREE_INPUTS, ICLPrompt, score_labels
from .templates import PromptTemplate, as_exemplar


@dataclass(frozen=True)
class BaselineResult:
    """The predicted label, its index, and the distribution over ``labels`` it is the argmax of."""

    label: str
    label_index: int
    labels: tuple[str, ...]
    probs: np.ndarray  # (K,), sums to one (calibrated when asked)
    uncalibrated: np.ndarray  # (K,)
    prompt: str

    @property
    def distribution(self) -> dict[str, float]:
        return {lab: float(p) for lab, p in zip(self.labels, self.probs)}


def _result(scores: Any, row: int) -> BaselineResult:
    probs = scores.probs[row]
    idx = int(np.argmax(probs))  # ties -> the first label, deterministically
    return BaselineResult(scores.labels[idx], idx, scores.labels, probs, scores.uncalibrated[row], scores.prompts[row])


def zero_shot(
    lm: Any,
    query: str,
    labels: Sequence[str],
    template: "PromptTemplate | str | None" = None,
    *,
    calibrate: bool = False,
    content_free: Sequence[str] = CONTENT_FREE_INPUTS,
) -> BaselineResult:
    """The label distribution of the prompt with no demonstrations (instruction and query only)."""
    return zero_shot_batch(lm, [query], labels, template, calibrate=calibrate, content_free=content_free)[0]


def icl(
    lm: Any,
    exemplars: Sequence[Any],
    query: str,
    labels: Sequence[str],
    template: "PromptTemplate | str | None" = None,
    *,
    calibrate: bool = False,
    content_free: Sequence[str] = CONTENT_FREE_INPUTS,
) -> BaselineResult:
    """The label distribution of one prompt holding every exemplar (in the order given)."""
    return icl_batch(lm, [exemplars], [query], labels, template, calibrate=calibrate, content_free=content_free)[0]


def zero_shot_batch(lm, queries, labels, template=None, *, calibrate=False, content_free=CONTENT_FREE_INPUTS):
    """:func:`zero_shot` for many queries in one model call."""
    prompts = [ICLPrompt.of((), q) for q in queries]
    scores = score_labels(lm, prompts, labels, template=template, calibrate=calibrate, content_free=content_free)
    return [_result(scores, i) for i in range(len(prompts))]


def icl_batch(lm, contexts, queries, labels, template=None, *, calibrate=False, content_free=CONTENT_FREE_INPUTS):
    """:func:`icl` for many (exemplars, query) pairs in one model call (``contexts[i]`` goes with ``queries[i]``)."""
    if len(contexts) != len(queries):
        raise ValueError(f"{len(contexts)} exemplar lists for {len(queries)} queries")
    prompts = [ICLPrompt(tuple(as_exemplar(e) for e in ex), q) for ex, q in zip(contexts, queries)]
    scores = score_labels(lm, prompts, labels, template=template, calibrate=calibrate, content_free=content_free)
    return [_result(scores, i) for i in range(len(prompts))]
