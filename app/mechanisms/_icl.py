"""The model-facing half of the mechanisms, through ``app.icl``: partitions and one
batched label-scoring call per query (all partitions' / experts' prompts together)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from app.icl.partition import partition_exemplars
from app.icl.scoring import partition_label_distribution
from app.icl.templates import PromptTemplate, get_template
from app.mechanisms.errors import MechanismParamError


def template_of(template: Any) -> PromptTemplate:
    try:
        return get_template(template)
    except (ValueError, TypeError) as exc:
        raise MechanismParamError(str(exc), param="template") from None


def partition(n: int, units: int, per_unit: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Disjoint units of ``per_unit`` exemplars from a uniformly random permutation (unused tail)."""
    return partition_exemplars(n, units, per_unit, rng)


def unit_label_probs(
    lm: Any,
    exemplars: Sequence[tuple[str, str]],
    units: Sequence[Sequence[int]],
    query: str,
    labels: Sequence[str],
    template: Any,
    *,
    calibrate: bool,
) -> np.ndarray:
    """(units, K) label distributions, one batched model call for all units."""
    return partition_label_distribution(
        lm, exemplars, units, query, labels, template=template_of(template), calibrate=calibrate
    )
