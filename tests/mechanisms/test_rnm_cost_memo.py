"""rnm builds an answer's cost dict once per distinct (plan, params) (issue 27): the remembered dict is the
one a fresh build gives (values and types: the same JSON), and a caller that changes its copy changes
nothing for the next answer."""

from __future__ import annotations

import itertools
import json

from app.mechanisms.rnm import RNM, RNMParams, _build_cost, _plan_cost, plan_noise

GRID = list(itertools.product(
    ["gaussian", "laplace", "gumbel"], [0.3, 1, 1.0, 8.0], [1e-6, 1e-5], [None, 8], [1, 4],
    ["replace-one", "add-remove"]))


def test_the_remembered_cost_is_a_fresh_build_over_a_grid():
    mech = RNM()
    for noise, eps, delta, partitions, shots, adjacency in GRID:
        params = {"noise": noise, "epsilon": eps, "delta": delta, "partitions": partitions,
                  "shots_per_partition": shots, "adjacency": adjacency}
        p = RNMParams.from_mapping(params)
        fresh = _build_cost(plan_noise(p, 64), p)
        for _ in range(2):  # built, then remembered
            got = mech.cost(params, 64)
            assert got == fresh
            assert json.dumps(got, sort_keys=True) == json.dumps(fresh, sort_keys=True)  # same types too
    assert _plan_cost.cache_info().hits >= len(GRID)


def test_a_changed_copy_changes_nothing_for_the_next_answer():
    mech = RNM()
    params = {"epsilon": 1.0, "partitions": 8, "shots_per_partition": 4}
    first = mech.cost(params, 64)
    expected = json.dumps(first, sort_keys=True)
    first["epsilon"] = 99.0
    first["params"]["scale"] = -1.0
    first["rdp"][0] = 123.0
    first["orders"].append(7.0)
    first["pld"]["parameter"] = 0.0
    again = mech.cost(params, 64)
    assert json.dumps(again, sort_keys=True) == expected
    assert again["rdp"] is not first["rdp"] and again["params"] is not first["params"]
