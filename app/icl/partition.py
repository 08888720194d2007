"""Disjoint random partitions of the exemplar set, drawn fresh for every query.

Private voting (Wu et al. 2024; Xia et al., "Tight and practical auditing of
DP-ICL", Algorithm 2, line 1) splits the private exemplars into T disjoint
partitions and prompts the model once per partition; disjointness is what
bounds one exemplar's influence to one vote.

Two samplers:

* **fixed size** (default): a uniformly random permutation of the ``n``
  indices, cut into ``partitions`` consecutive blocks of ``shots_per_partition``
  (the tail of the permutation is left unused when ``T * shots < n``). The
  permutation also fixes the order of the demonstrations inside a prompt.
* **Poisson** (``poisson=True``): ContextLeak (Choi et al.), Appendix A.2,
  Algorithm 3 "Disjoint Poisson Sample": for k = 1..T, every exemplar still in
  the residual pool R joins partition k independently with probability
  ``p_k = min(1, s / |R|)`` and leaves R. With ``s = |D| / T`` this is the
  paper's algorithm verbatim; we let ``s = shots_per_partition`` set the
  expected size instead (``None`` gives the paper's ``|D| / T``). Sizes are
  random and a partition may be empty (its prompt is then zero-shot).

Randomness comes only from the ``numpy.random.Generator`` passed in.
"""

from __future__ import annotations

import numpy as np


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def partition_exemplars(
    n: int,
    partitions: int,
    shots_per_partition: int | None,
    rng: np.random.Generator,
    poisson: bool = False,
) -> list[np.ndarray]:
    """``partitions`` disjoint index arrays over ``range(n)``.

    ``shots_per_partition=None`` uses as many exemplars as divide evenly
    (``n // partitions`` each; Poisson: expected ``n / partitions``).
    Raises ``ValueError`` when ``partitions * shots_per_partition > n``.
    """
    n = _check_int("n (number of exemplars)", n, 0)
    t = _check_int("partitions", partitions, 1)
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator")
    if shots_per_partition is None:
        if n < t:
            raise ValueError(f"partitions ({t}) exceeds the number of exemplars ({n})")
        shots: float = n / t if poisson else n // t
    else:
        shots = _check_int("shots_per_partition", shots_per_partition, 1)
        if t * shots > n:
            raise ValueError(
                f"partitions x shots_per_partition = {t} x {shots} = {t * shots} exceeds the "
                f"number of exemplars ({n}); use fewer partitions or fewer shots"
            )
    if not poisson:
        s = int(shots)
        perm = rng.permutation(n)
        return [perm[k * s:(k + 1) * s].copy() for k in range(t)]
    return _disjoint_poisson(n, t, float(shots), rng)


def _disjoint_poisson(n: int, t: int, expected: float, rng: np.random.Generator) -> list[np.ndarray]:
    """ContextLeak Algorithm 3 with expected partition size ``expected``."""
    pool = rng.permutation(n)  # residual pool R, in random order (= prompt order)
    out: list[np.ndarray] = []
    for _ in range(t):
        p = min(1.0, expected / len(pool)) if len(pool) else 0.0  # line 3: p_k = min(1, (|D|/m) / |R|)
        take = rng.random(len(pool)) < p  # lines 5-8: Bernoulli(p_k) per exemplar in R
        out.append(pool[take].copy())
        pool = pool[~take]  # line 10: R <- R \ E_k
    return out
