"""The model-facing half of the mechanisms, through ``app.icl``: partitions and one
batched label-scoring call per query (all partitions' / experts' prompts together),
and :func:`classify_by_units`, the classification path ``rnm`` and ``poe`` share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from app.icl.partition import partition_exemplars
from app.icl.scoring import ICLPrompt, label_distribution
from app.icl.templates import PromptTemplate, as_exemplar, get_template
from app.mechanisms.aggregate import FloatArray, IntArray
from app.mechanisms.base import ClassificationResult, IndexUnits, check_labels, check_query, normalize_exemplars
from app.mechanisms.errors import MechanismParamError
from app.mechanisms.rng import resolve_rng

if TYPE_CHECKING:
    from app.llm.types import LanguageModel


def template_of(template: Any) -> PromptTemplate:
    try:
        return get_template(template)
    except (ValueError, TypeError) as exc:
        raise MechanismParamError(str(exc), param="template") from None


def partition(n: int, units: int, per_unit: int, rng: np.random.Generator) -> list[IntArray]:
    """Disjoint units of ``per_unit`` exemplars from a uniformly random permutation (unused tail)."""
    return partition_exemplars(n, units, per_unit, rng)


def unit_label_probs(
    lm: LanguageModel,
    exemplars: Sequence[tuple[str, str]],
    units: IndexUnits,
    query: str,
    labels: Sequence[str],
    template: Any,
    *,
    calibrate: bool,
) -> FloatArray:
    """(units, K) label distributions, one batched model call for all units.

    ``exemplars`` are pairs from ``normalize_exemplars`` (every caller's): the prompts are built from the
    pairs the units use, as ``app.icl.partition_label_distribution`` builds them, without its conversion
    of all n exemplars first (432 per answer on the bundled set, for the 32 an 8 x 4 answer reads)."""
    prompts = [ICLPrompt(tuple(as_exemplar(exemplars[int(i)]) for i in unit), query) for unit in units]
    return label_distribution(lm, prompts, labels, calibrate=calibrate, template=template_of(template))


ReleaseFn = Callable[[FloatArray, tuple[str, ...], int, np.random.Generator, list[IntArray]], ClassificationResult]
"""``(label_probs (units, K), labels, n_exemplars, rng, units) -> result``: a mechanism's private step."""


def classify_by_units(
    lm: LanguageModel,
    exemplars: Sequence[Any],
    query: str,
    labels: Sequence[str],
    template: Any,
    rng: np.random.Generator | None,
    *,
    unit_count: Callable[[int], int],
    per_unit: int,
    calibrate: bool,
    release: ReleaseFn,
) -> ClassificationResult:
    """Validate the inputs, split the n exemplars into ``unit_count(n)`` disjoint units of
    ``per_unit`` (a uniformly random permutation drawn from ``rng``), score every unit's
    label distribution in one batched model call, and hand it to ``release``: the body of
    ``UnitMechanism.classify`` (rnm: units = partitions, poe: units = experts).
    The generator draws the permutation first, then the release's noise."""
    ex = normalize_exemplars(exemplars)
    labs = check_labels(labels)
    q = check_query(query)
    count = unit_count(len(ex))
    g = resolve_rng(rng)
    units = partition(len(ex), count, per_unit, g)
    probs = unit_label_probs(lm, ex, units, q, labs, template, calibrate=calibrate)
    return release(probs, labs, len(ex), g, units)
