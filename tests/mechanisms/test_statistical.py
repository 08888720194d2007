"""Sampled checks of each mechanism's guarantee on neighbouring small worlds.

Clean votes (RNM) or expert outputs (PoE) are fixed for two neighbouring
exemplar sets; the mechanism's own sampling path (``sample_labels``, the code of
``release``, vectorised) draws N labels from each; the label counts give
one-sided Clopper-Pearson bounds.

Tolerances (binomial, stated): every bound is at confidence 1 - 1e-6 after
Bonferroni over the labels and directions compared
(``app.mechanisms.verify``), so a correct mechanism fails the "within e^eps"
check with probability <= 1e-6 per test. Seeds are fixed, so the run is
deterministic. "Near it": the same lower bound must reach a stated fraction of
eps on the worst-case pair, and the plug-in estimate must match the exact value
(``test_exact_privacy``) within 0.1 nats. Each test also shows that the checker
rejects the same mechanism with half the noise.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from app.mechanisms import get_mechanism
from app.mechanisms.rnm import RNMParams, plan_noise
from app.mechanisms.verify import counts, sampled_delta_lower_bound, sampled_epsilon_lower_bound

N = 300_000
ALPHA = 1e-6


def _one_hot(votes) -> np.ndarray:
    """Partition label distributions whose argmaxes give ``votes``."""
    rows = [j for j, c in enumerate(votes) for _ in range(int(c))]
    return np.eye(len(votes))[rows]


def _rnm_counts(votes, params, seed, n_exemplars=None):
    labels = [f"l{j}" for j in range(len(votes))]
    n = n_exemplars or int(sum(votes))
    lab = get_mechanism("rnm").sample_labels(_one_hot(votes), labels, params, n, np.random.default_rng(seed), size=N)
    return counts(lab, len(votes))


# (noise, adjacency, world D, neighbour D', exact loss / eps on that pair, floor for the lower bound)
PURE_CASES = [
    ("gumbel", "replace-one", [0, 6], [1, 5], 0.925, 0.8),
    ("gumbel", "add-remove", [0, 4], [1, 4], 0.968, 0.8),
    ("laplace", "replace-one", [0, 6], [1, 5], 0.777, 0.6),
    ("laplace", "add-remove", [3, 3, 0], [3, 3, 1], 0.983, 0.8),
]


@pytest.mark.parametrize("noise,adjacency,d0,d1,exact,floor", PURE_CASES)
def test_rnm_pure_dp_sampled(noise, adjacency, d0, d1, exact, floor):
    eps = 1.0
    p = {"epsilon": eps, "noise": noise, "adjacency": adjacency}
    c0, c1 = _rnm_counts(d0, p, 1), _rnm_counts(d1, p, 2)
    b = sampled_epsilon_lower_bound(c0, c1, ALPHA)
    assert b.lower <= eps
    assert b.lower >= floor * eps
    assert b.estimate == pytest.approx(exact * eps, abs=0.1)
    # Half the noise (the scale of 2 eps): rejected.
    broken = {**p, "epsilon": 2 * eps}
    bb = sampled_epsilon_lower_bound(_rnm_counts(d0, broken, 3), _rnm_counts(d1, broken, 4), ALPHA)
    assert bb.lower > eps


def _pair(v1, adjacency):
    """D for D' = v1: one label-0 vote moved to label 1 (replace-one) or removed (add-remove)."""
    return [v1[0] - 1, v1[1] + 1] if adjacency == "replace-one" else [v1[0] - 1, v1[1]]


def _worst_world(sigma: float, eps: float, adjacency: str) -> tuple[list[int], float]:
    """Two labels, at most 60 votes: the world D' = [a, b] whose event {label 0} has the
    largest P(D') - e^eps P(D) (exact: label 0 wins iff the noisy margin is positive)."""
    best: tuple[list[int], float] = ([1, 0], -1.0)
    for a in range(1, 61):
        for b in range(0, 61 - a):
            v0 = _pair([a, b], adjacency)
            d = norm.cdf((a - b) / (math.sqrt(2) * sigma)) - math.exp(eps) * norm.cdf(
                (v0[0] - v0[1]) / (math.sqrt(2) * sigma)
            )
            if d > best[1]:
                best = ([a, b], d)
    return best


@pytest.mark.parametrize("adjacency", ["replace-one", "add-remove"])
def test_rnm_gaussian_sampled_delta(adjacency):
    # A large delta makes the privacy profile measurable with N samples.
    eps, delta = 1.0, 0.05
    p = {"epsilon": eps, "delta": delta, "adjacency": adjacency}
    plan = plan_noise(RNMParams(**p), 40)
    v1, exact = _worst_world(plan.scale, eps, adjacency)
    v0 = _pair(v1, adjacency)
    c1, c0 = _rnm_counts(v1, p, 5), _rnm_counts(v0, p, 6)
    b = sampled_delta_lower_bound(c1, c0, eps, [0], ALPHA)
    assert b.lower <= delta
    assert b.estimate == pytest.approx(exact, abs=0.006)
    if adjacency == "replace-one":
        assert exact >= 0.95 * delta  # the moved vote attains the Gaussian's delta(eps)
        assert b.lower >= 0.7 * delta
    # Half the noise: the worst event now exceeds delta.
    half = plan.scale / 2
    v1, _ = _worst_world(half, eps, adjacency)
    lab = {}
    for key, v, seed in (("1", v1, 7), ("0", _pair(v1, adjacency), 8)):
        noisy = np.asarray(v, dtype=float) + np.random.default_rng(seed).normal(0.0, half, size=(N, 2))
        lab[key] = counts(np.argmax(noisy, axis=1), 2)
    assert sampled_delta_lower_bound(lab["1"], lab["0"], eps, [0], ALPHA).lower > delta


E3 = np.array([(1 - 2e-9, 1e-9, 1e-9), (1e-9, 1 - 2e-9, 1e-9)])  # experts "a" and "b"


@pytest.mark.parametrize(
    "adjacency,d0,d1,exact,floor",
    [
        ("replace-one", [0, 0, 0], [1, 0, 0], 0.844, 0.75),  # one expert's exemplar swapped
        ("add-remove", [0, 0], [0, 0, 1], 0.947, 0.85),  # one expert added
    ],
)
def test_poe_sampled(adjacency, d0, d1, exact, floor):
    eps, labels = 2.0, ("a", "b", "c")
    poe = get_mechanism("poe")

    def sample(world, params, seed):
        lab = poe.sample_labels(E3[world], labels, params, len(world), np.random.default_rng(seed), size=N)
        return counts(lab, 3)

    p = {"epsilon": eps, "adjacency": adjacency, "clip": 2.0}
    b = sampled_epsilon_lower_bound(sample(d0, p, 9), sample(d1, p, 10), ALPHA)
    assert floor * eps <= b.lower <= eps
    assert b.estimate == pytest.approx(exact * eps, abs=0.1)
    broken = {**p, "epsilon": 2 * eps}  # half the noise (double inverse temperature)
    assert sampled_epsilon_lower_bound(sample(d0, broken, 11), sample(d1, broken, 12), ALPHA).lower > eps
