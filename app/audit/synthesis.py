"""Canary membership inference against the DP synthesizer (``app.mechanisms.synthesize``).

The canary is a private exemplar; the attacker sees only the released synthetic set. Each trial
has the context D (canary absent) or D with the canary replacing one exemplar
of the canary's label (replace-one neighbours; label counts, which are public, do not move; half of the
trials of each part, in random order), the
synthesizer runs with fresh noise, and the attack reads the synthetic set:

* ``exact``: the canary string occurs verbatim in a synthetic text;
* ``label_copied``: a synthetic text of the canary's label shares at least half of the canary's
  character 4-grams;
* the statistic: the largest share of the canary's character 4-grams found in one synthetic text
  (1.0 for an exact copy), thresholded for the membership guess.

The threshold is chosen on the first ``threshold_fraction`` of the trials and the rigorous
Clopper-Pearson bound (``app.audit.estimates``) is computed on the others, as the classification
campaign does. A bound above the synthesizer's epsilon refutes the claim; a bound below it says
nothing more than that this attack did not see a leak (the power of this black-box attack is not
modelled: the job's verdict is then "inconclusive").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from app.audit.estimates import estimates_from_guesses, select_threshold, split_selection

NGRAM = 4


def _grams(text: str, n: int = NGRAM) -> set[str]:
    t = " ".join(str(text).lower().split())
    return {t[i:i + n] for i in range(max(1, len(t) - n + 1))}


def canary_similarity(canary: str, text: str) -> float:
    """Share of the canary's character 4-grams that occur in ``text`` (1.0 for a verbatim copy)."""
    g = _grams(canary)
    return len(g & _grams(text)) / len(g) if g else 0.0


@dataclass
class SynthesisAttack:
    statistic: float
    exact: bool
    label_copied: bool

    @classmethod
    def read(cls, canary_text: str, canary_label: str, synthetic: Sequence[tuple[str, str]]) -> "SynthesisAttack":
        sims = [(canary_similarity(canary_text, x), y) for x, y in synthetic]
        best = max((s for s, _ in sims), default=0.0)
        exact = any(" ".join(canary_text.split()).lower() in " ".join(x.split()).lower() for x, _ in synthetic)
        copied = any(s >= 0.5 and y == canary_label for s, y in sims)
        return cls(best, exact, copied)


@dataclass
class SynthesisAuditResult:
    trials: list[dict[str, Any]]
    estimates: dict[str, Any]
    epsilon: float
    epsilon_claimed: float
    threshold: float
    summary: dict[str, Any] = field(default_factory=dict)


def run_synthesis_audit(
    synthesize: Callable[[list[tuple[str, str]], np.random.Generator], list[tuple[str, str]]],
    exemplars: Sequence[tuple[str, str]],
    canary_text: str,
    canary_label: str,
    *,
    trials: int,
    rng: np.random.Generator,
    epsilon_claimed: float,
    delta: float,
    confidence: float = 0.95,
    threshold_fraction: float = 0.5,
    progress: Callable[[float, str], None] | None = None,
) -> SynthesisAuditResult:
    """``synthesize(context, rng)`` returns the released synthetic set of one run."""
    ex = list(exemplars)
    slots = [i for i, (_, y) in enumerate(ex) if y == canary_label]
    if not slots:
        raise ValueError(f"the context has no exemplar of the canary's label {canary_label!r} to replace")
    # Balanced membership within the selection part and within the evaluation part (each a random
    # order): both hypotheses appear in both, also for a handful of trials. The bound is conditional
    # on the membership counts, which are fixed before any trial.
    k = max(1, int(round(trials * threshold_fraction)))
    members = np.concatenate([rng.permutation(np.arange(k) < (k + 1) // 2),
                              rng.permutation(np.arange(trials - k) < (trials - k + 1) // 2)])
    rows: list[dict[str, Any]] = []
    stats = np.zeros(trials)
    for t in range(trials):
        ctx = list(ex)
        if members[t]:
            ctx[slots[int(rng.integers(len(slots)))]] = (canary_text, canary_label)
        out = synthesize(ctx, np.random.default_rng(rng.integers(2**63)))
        a = SynthesisAttack.read(canary_text, canary_label, out)
        stats[t] = a.statistic
        rows.append({"trial": t, "member": bool(members[t]), "statistic": a.statistic, "exact": a.exact,
                     "label_copied": a.label_copied, "synthetic_count": len(out)})
        if progress is not None:
            progress((t + 1) / trials, f"trial {t + 1} of {trials}")
    sel = split_selection(trials, threshold_fraction, members)
    ev = ~sel
    if not (members[sel].any() and (~members[sel]).any() and members[ev].any() and (~members[ev]).any()):
        raise ValueError("too few trials: both hypotheses must appear in the selection and the evaluation halves")
    tau = select_threshold(stats[sel & members], stats[sel & ~members], confidence=confidence, delta=delta)
    est = estimates_from_guesses(stats[ev] > tau, members[ev], threat_model="black-box", confidence=confidence,
                                 delta=delta, epsilon_theory=epsilon_claimed, gdp_applicable=False, threshold=tau,
                                 selection_trials=int(sel.sum()),
                                 assumptions=["attack reads the released synthetic set only (4-gram overlap)"])
    m = members

    def rate(key: str, mask: np.ndarray) -> float | None:
        vals = [r[key] for r, k in zip(rows, mask) if k]
        return float(np.mean(vals)) if vals else None

    summary = {"exact_rate_member": rate("exact", m), "exact_rate_nonmember": rate("exact", ~m),
               "label_copied_rate_member": rate("label_copied", m),
               "label_copied_rate_nonmember": rate("label_copied", ~m),
               "mean_statistic_member": rate("statistic", m), "mean_statistic_nonmember": rate("statistic", ~m)}
    return SynthesisAuditResult(rows, {"black-box": est.to_dict()}, float(est.epsilon_lower), float(epsilon_claimed),
                                float(tau), summary)
