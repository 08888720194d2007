"""Exact privacy checks on small worlds: every pair of neighbouring exemplar sets, the
exact law of the released label from the mechanism's own code, and the checker
rejecting deliberately broken variants.

A "world" fixes what each unit (RNM partition, PoE expert) outputs: a label
distribution per unit. Neighbours: add/remove one unit (add-remove adjacency with
one exemplar per unit, all used) or change one unit's output (replace-one).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from app.mechanisms import aggregate as agg
from app.mechanisms import get_mechanism
from app.mechanisms.poe import PoEParams, inverse_temperature
from app.mechanisms.rnm import RNMParams, exact_distribution, plan_noise
from app.mechanisms.sensitivity import UnitChange
from app.mechanisms.verify import hockey_stick, max_log_ratio

RNG = np.random.default_rng(0)  # release() draws one label; the checks read the exact law only

# Expert outputs over K = 3 labels: confident, soft, uniform, and ones whose log-probs
# fall below any clip we use (so the clip is active).
EXPERT_TYPES = np.array(
    [
        (1 - 2e-9, 1e-9, 1e-9),
        (0.6, 0.3, 0.1),
        (1 / 3, 1 / 3, 1 / 3),
        (1e-9, 1 - 2e-9, 1e-9),
        (0.05, 0.05, 0.9),
        (0.5, 0.5 - 1e-9, 1e-9),
    ]
)
LABELS3 = ("a", "b", "c")


def _neighbours(world: tuple[int, ...], change: UnitChange, n_types: int):
    if change == UnitChange.ADD_UNIT:
        return [world + (x,) for x in range(n_types)]
    return [world[:i] + (x,) + world[i + 1:] for i in range(len(world)) for x in range(n_types) if x != world[i]]


def _worlds(max_units: int, n_types: int):
    for n in range(1, max_units + 1):
        yield from itertools.combinations_with_replacement(range(n_types), n)


def _poe_law(world, params) -> np.ndarray:
    res = get_mechanism("poe").release(EXPERT_TYPES[list(world)], LABELS3, params, len(world), RNG)
    return np.array([res.distribution[y] for y in LABELS3])


def _max_loss(law, change: UnitChange, max_units: int, n_types: int):
    cache: dict[tuple[int, ...], np.ndarray] = {}

    def get(w):
        if w not in cache:
            cache[w] = law(w)
        return cache[w]

    worst, pair = 0.0, None
    for w in _worlds(max_units, n_types):
        for w2 in _neighbours(w, change, n_types):
            r = max_log_ratio(get(w), get(w2))
            if r > worst:
                worst, pair = r, (w, w2)
    return worst, pair


@pytest.mark.parametrize("adjacency,change", [("add-remove", UnitChange.ADD_UNIT), ("replace-one", UnitChange.SWAP_UNIT)])
@pytest.mark.parametrize("epsilon", [1.0, 2.0])
def test_poe_exact_loss_within_epsilon_and_near_it(adjacency, change, epsilon):
    params = PoEParams(epsilon=epsilon, adjacency=adjacency, clip=2.0)
    worst, pair = _max_loss(lambda w: _poe_law(w, params), change, 4, len(EXPERT_TYPES))
    assert worst <= epsilon * (1 + 1e-9), (worst, pair)
    # Tightness: with 4 experts the worst pair already uses most of the budget
    # (the limit is eps as the other experts push the target label's mass to 0).
    floor = {1.0: {UnitChange.ADD_UNIT: 0.95, UnitChange.SWAP_UNIT: 0.75}, 2.0: {UnitChange.ADD_UNIT: 0.99, UnitChange.SWAP_UNIT: 0.9}}
    assert worst >= floor[epsilon][change] * epsilon, (worst, pair)


def test_poe_checker_rejects_broken_variants():
    eps, c = 2.0, 2.0
    # (a) the add/remove temperature eps/c used under replace-one: about 2 eps.
    def law_a(w):
        u = agg.clipped_log_probs(EXPERT_TYPES[list(w)], c).sum(axis=0)
        return agg.exponential_mechanism_distribution(u, eps / c)

    worst, _ = _max_loss(law_a, UnitChange.SWAP_UNIT, 4, len(EXPERT_TYPES))
    assert worst > 1.8 * eps

    # (b) no clipping (raw log-probs with the temperature of c = 2): unbounded loss.
    def law_b(w):
        u = np.log(EXPERT_TYPES[list(w)]).sum(axis=0)
        return agg.exponential_mechanism_distribution(u, eps / (2 * c))

    worst, _ = _max_loss(law_b, UnitChange.SWAP_UNIT, 2, len(EXPERT_TYPES))
    assert worst > 3 * eps


def test_poe_groups_and_subsets_fall_back_to_replace_one_temperature():
    eps, c = 1.0, 2.0
    assert inverse_temperature(PoEParams(epsilon=eps, clip=c, adjacency="add-remove")) == pytest.approx(eps / c)
    for p in (
        PoEParams(epsilon=eps, clip=c, adjacency="add-remove", group_size=2),
        PoEParams(epsilon=eps, clip=c, adjacency="add-remove", experts=3),
        PoEParams(epsilon=eps, clip=c, adjacency="replace-one"),
    ):
        assert inverse_temperature(p) == pytest.approx(eps / (2 * c))


# ---------------------------------------------------------------------------
# RNM
# ---------------------------------------------------------------------------


def _vote_worlds(k: int, max_t: int):
    for t in range(1, max_t + 1):
        for comb in itertools.combinations_with_replacement(range(k), t):
            yield np.bincount(comb, minlength=k).astype(float)


def _vote_neighbours(v: np.ndarray, change: UnitChange):
    eye = np.eye(v.size)
    if change == UnitChange.ADD_UNIT:
        return [v + eye[j] for j in range(v.size)]
    return [v + eye[a] - eye[b] for a in range(v.size) for b in range(v.size) if a != b and v[b] > 0]


def _rnm_plan(noise: str, adjacency: str, epsilon: float, delta: float = 1e-5):
    p = RNMParams(epsilon=epsilon, delta=delta, adjacency=adjacency, noise=noise)
    return plan_noise(p, 8)  # partitions default to n: add-remove is ADD_UNIT


@pytest.mark.parametrize("noise", ["gumbel", "laplace"])
@pytest.mark.parametrize("adjacency", ["add-remove", "replace-one"])
def test_rnm_pure_variants_exact_loss(noise, adjacency):
    eps = 1.0
    plan = _rnm_plan(noise, adjacency, eps)
    worlds = list(_vote_worlds(2, 5 if noise == "laplace" else 12)) + list(_vote_worlds(3, 2 if noise == "laplace" else 3))
    worst = 0.0
    for v in worlds:
        p = exact_distribution(v, plan)
        for w in _vote_neighbours(v, plan.change):
            worst = max(worst, max_log_ratio(p, exact_distribution(w, plan)))
    assert worst <= eps * (1 + 1e-7)
    # Worst cases from a wider scan (T <= 12): [12, 0] vs [11, 1] (replace-one), [12, 0] vs
    # [13, 0] (Gumbel, add-remove), [3, 3, 0] vs [3, 3, 1] (Laplace, add-remove); tight up to
    # the finite vote gap.
    if plan.change == UnitChange.SWAP_UNIT:
        v, w = np.array([12.0, 0.0]), np.array([11.0, 1.0])
        floor = 0.99 if noise == "gumbel" else 0.85
    elif noise == "gumbel":
        v, w = np.array([12.0, 0.0]), np.array([13.0, 0.0])
        floor = 0.99
    else:
        v, w = np.array([3.0, 3.0, 0.0]), np.array([3.0, 3.0, 1.0])
        floor = 0.97
    tight = max_log_ratio(exact_distribution(v, plan), exact_distribution(w, plan))
    assert floor * eps <= tight <= eps * (1 + 1e-7)
    # Half the noise: the same pair now exceeds eps.
    half = dataclasses.replace(plan, scale=plan.scale / 2)
    assert max_log_ratio(exact_distribution(v, half), exact_distribution(w, half)) > 1.3 * eps


@pytest.mark.parametrize("adjacency", ["add-remove", "replace-one"])
@pytest.mark.parametrize("epsilon", [1.0, 2.0])
def test_rnm_gaussian_exact_delta(adjacency, epsilon):
    delta = 1e-5
    plan = _rnm_plan("gaussian", adjacency, epsilon, delta)
    half = dataclasses.replace(plan, scale=plan.scale / 2)
    worlds = list(_vote_worlds(2, 6)) + list(_vote_worlds(3, 3))
    # Two-label worlds around the worst vote margin (the likelihood-ratio threshold of the
    # Gaussian mechanism falls at a margin of about 29 votes for eps = 1, 17 for eps = 2).
    # (and, for the half-noise check, around its own worst margin: about 13 and 8)
    margins = [*range(10, 16), *range(24, 33)] if epsilon == 1.0 else [*range(6, 11), *range(13, 21)]
    worlds += [np.array([0.0, float(t)]) for t in margins] + [np.array([1.0, float(t)]) for t in margins]
    cache: dict = {}

    def law(v, pl):
        key = (tuple(v), pl.scale)
        if key not in cache:
            cache[key] = exact_distribution(v, pl)
        return cache[key]

    worst = worst_half = 0.0
    for v in worlds:
        for w in _vote_neighbours(v, plan.change):
            worst = max(worst, hockey_stick(law(v, plan), law(w, plan), epsilon))
            worst_half = max(worst_half, hockey_stick(law(v, half), law(w, half), epsilon))
    assert worst <= delta * (1 + 1e-6)
    if plan.change == UnitChange.SWAP_UNIT:
        # Moving a vote shifts the 2-label margin by the full L2 sensitivity: near-tight.
        assert worst >= 0.9 * delta
    else:
        # Adding a vote moves the margin by 1/sqrt(2) of the noise's sensitivity: the
        # label release is looser than the noisy votes (documented), still nonzero.
        assert 0.0 < worst < delta
    assert worst_half > 10 * delta


def test_exact_laws_match_sampling():
    """The integrals agree with the samplers (chi-square, 4 labels, p-value > 1e-4)."""
    from scipy.stats import chisquare

    rng = np.random.default_rng(7)
    v = np.array([3.0, 1.0, 0.0, 0.0])
    for draw, law in (
        (agg.gaussian_noise, agg.gaussian_rnm_distribution),
        (agg.laplace_noise, agg.laplace_rnm_distribution),
        (agg.gumbel_noise, agg.gumbel_rnm_distribution),
    ):
        n = 200_000
        obs = np.bincount(agg.noisy_argmax(draw(v, 1.5, rng, size=n)), minlength=4)
        assert chisquare(obs, law(v, 1.5) * n).pvalue > 1e-4
    # Extreme tails: closed forms.
    assert agg.gaussian_rnm_distribution([0.0, 30.0], 2.0)[0] == pytest.approx(1.3883e-26, rel=1e-3)
    assert agg.laplace_rnm_distribution([0.0, 30.0], 1.0)[0] == pytest.approx(math.exp(-30) * 32 / 4, rel=1e-6)
