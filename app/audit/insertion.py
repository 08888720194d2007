"""Putting the canary into the context, and the plan of trials.

* ``contextleak``: every trial flips a fair coin b; if b = 1 the canary replaces
  one exemplar chosen uniformly at random (ContextLeak Section 3.1,
  Insert(D, c); Algorithm 1 lines 3-8). Neighbouring sets under replace-one.
* ``paired``: two fixed neighbouring contexts, C1 with the canary in place of
  one exemplar and C0 without it (tight-auditing paper, Section 3.2), and the
  same number of trials under each, in random order.

Either way each trial knows its truth (``member``) and its context.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

Exemplar = tuple[str, str]
INSERTIONS = ("contextleak", "paired")


def exemplar_tuple(e: Sequence[str]) -> Exemplar:
    """The tuple form of an exemplar (JSON gives lists); its items are kept as they are."""
    return cast(Exemplar, tuple(e))


def replace_one(exemplars: Sequence[Exemplar], canary: Exemplar, index: int) -> list[Exemplar]:
    """D with entry ``index`` replaced by the canary (ContextLeak Algorithm 1, lines 6-8)."""
    out = list(exemplars)
    if not 0 <= index < len(out):
        raise ValueError(f"index {index} outside the {len(out)} exemplars")
    out[index] = exemplar_tuple(canary)
    return out


def paired_contexts(exemplars: Sequence[Exemplar], canary: Exemplar, index: int) -> tuple[list[Exemplar], list[Exemplar]]:
    """(C1, C0): C0 = the exemplars, C1 = C0 with entry ``index`` replaced by the canary
    (tight-auditing paper, Section 3.2)."""
    return replace_one(exemplars, canary, index), list(exemplars)


@dataclass(frozen=True)
class TrialPlan:
    members: np.ndarray  # bool (n,): canary in the context
    contexts: list[list[Exemplar]]

    def __len__(self) -> int:
        return int(self.members.size)


def plan_trials(
    exemplars: Sequence[Exemplar], canary: Exemplar, trials: int, insertion: str, rng: np.random.Generator
) -> TrialPlan:
    """``trials`` trials. ``paired``: trials // 2 under each hypothesis (trials rounded down to even)."""
    ex = [exemplar_tuple(e) for e in exemplars]
    if len(ex) < 1:
        raise ValueError("at least one exemplar is needed")
    if tuple(canary) in ex:
        raise ValueError("the canary is already one of the exemplars")
    if insertion == "contextleak":
        members = rng.random(trials) < 0.5  # Z ~ Bernoulli(1/2), ContextLeak 3.1
        idx = rng.integers(0, len(ex), size=trials)
        contexts = [replace_one(ex, canary, int(i)) if m else list(ex) for m, i in zip(members, idx)]
        return TrialPlan(members, contexts)
    if insertion == "paired":
        half = trials // 2
        if half < 1:
            raise ValueError("paired insertion needs at least 2 trials")
        c1, c0 = paired_contexts(ex, canary, int(rng.integers(len(ex))))
        members = np.zeros(2 * half, dtype=bool)
        members[:half] = True
        rng.shuffle(members)
        return TrialPlan(members, [c1 if m else c0 for m in members])
    raise ValueError(f"unknown insertion {insertion!r}; use one of {', '.join(INSERTIONS)}")
