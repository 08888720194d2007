"""Under add/remove the exemplar count n differs between neighbours, so a unit layout filled in
from n would differ too. The sensitivity analyses (``app.mechanisms.sensitivity``: one exemplar
touches one unit, by a permutation coupling) hold only if the neighbours' units have the same
size; a change of the unit COUNT is covered only when every unit holds one exemplar (each
mechanism's module doc: ESA's noisy sum, KSA's monotone counts, clip-softmax's and PoE's sums,
MOZO's zero-shot padding). These tests walk n = 1..80 with default parameters (and with only the
count given) and check every pair of neighbours (n, n + 1) that the mechanism serves."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from app.mechanisms import clip_softmax as cs
from app.mechanisms import esa, ksa, mozo, poe_decode
from app.mechanisms.errors import MechanismParamError
from app.mechanisms.gen_common import GenerationRequest

# (configure, cfg -> (unit count, exemplars per unit), the count parameter, the size parameter)
MECHS: dict[str, tuple[Callable[[GenerationRequest], Any], Callable[[Any], tuple[int, int]], str, str]] = {
    "esa": (esa.configure, lambda c: (c.partitions, c.shots_per_partition), "partitions", "shots_per_partition"),
    "ksa": (ksa.configure, lambda c: (c.partitions, c.shots_per_partition), "partitions", "shots_per_partition"),
    "clip_softmax": (cs.configure, lambda c: (c.prompts, c.shots_per_prompt), "prompts", "shots_per_prompt"),
    "poe": (poe_decode.configure, lambda c: (c.experts, c.group_size), "experts", "group_size"),
    "mozo": (mozo.configure, lambda c: (c.experts, c.group_size), "experts", "group_size"),
}
N_MAX = 80


def _units(name: str, n: int, adjacency: str, params: dict[str, Any]) -> tuple[int, int] | None:
    configure, units, _, _ = MECHS[name]
    req = GenerationRequest.build([(f"in {i}", f"out {i}") for i in range(n)], "q", epsilon=4.0, delta=1e-5,
                                  adjacency=adjacency, max_tokens=4, params=params)
    try:
        return units(configure(req))
    except MechanismParamError:
        return None  # refused: no release, nothing to compare


def _param_sets(name: str) -> list[dict[str, Any]]:
    _, _, count, _ = MECHS[name]
    return [{}, {count: 2}, {count: 3}]


def _walk(name: str) -> list[int]:
    """n = 1..80, and for mozo also around its default's 60 x 4 = 240 (app/mechanisms/gen_defaults.py)."""
    ns = list(range(1, N_MAX + 1))
    return ns + list(range(232, 250)) if name == "mozo" else ns


@pytest.mark.parametrize("name", sorted(MECHS))
def test_add_remove_neighbours_get_the_same_unit_size(name):
    for params in _param_sets(name):
        walk = _walk(name)
        layouts = {n: _units(name, n, "add-remove", params) for n in walk + [n + 1 for n in walk]}
        served = [n for n in walk if layouts[n] and layouts[n + 1]]
        assert served or params, (name, params)
        for n in served:
            (u, k), (u2, k2) = layouts[n], layouts[n + 1]  # type: ignore[misc]
            assert k == k2, f"{name} {params}: n={n} gets {u} x {k}, n={n + 1} gets {u2} x {k2}"
            if u != u2:  # an added unit: covered only with one exemplar per unit, every one used
                assert k == 1 and u == n and u2 == n + 1, (name, params, n, (u, k), (u2, k2))


@pytest.mark.parametrize("name, n", [("esa", 15), ("esa", 16), ("ksa", 19), ("ksa", 39)])
def test_replace_one_keeps_the_layout_filled_in_from_n(name, n):
    """Under replace-one n is the same for both neighbours: the default still adapts to it."""
    got = _units(name, n, "replace-one", {})
    d_units, d_shots = (esa.DEFAULT_PARTITIONS, esa.DEFAULT_SHOTS) if name == "esa" else \
        (ksa.DEFAULT_PARTITIONS, ksa.DEFAULT_SHOTS)
    assert got == (d_units, max(1, min(d_shots, n // d_units)))


@pytest.mark.parametrize("name", ["esa", "ksa"])
def test_add_remove_default_size_that_does_not_fit_is_refused_naming_the_field(name):
    configure, units, count, size = MECHS[name]
    d_units = esa.DEFAULT_PARTITIONS if name == "esa" else ksa.DEFAULT_PARTITIONS
    d_shots = esa.DEFAULT_SHOTS if name == "esa" else ksa.DEFAULT_SHOTS
    too_few = d_units * d_shots - 1
    req = GenerationRequest.build([("x", "y")] * too_few, "q", epsilon=4.0, adjacency="add-remove")
    with pytest.raises(MechanismParamError) as e:
        configure(req)
    assert e.value.param == f"params.{size}"
    assert "add-remove" in e.value.message and f"set params.{size}" in e.value.message
    # Enough exemplars: the constant default, as replace-one gives there.
    enough = GenerationRequest.build([("x", "y")] * (too_few + 1), "q", epsilon=4.0, adjacency="add-remove")
    assert units(configure(enough)) == (d_units, d_shots)
    # The size given explicitly: served as before.
    given = GenerationRequest.build([("x", "y")] * too_few, "q", epsilon=4.0, adjacency="add-remove",
                                    params={size: 1})
    assert units(configure(given)) == (d_units, 1)
