"""A result's internals as JSON values (``base._jsonable``): built-in scalars keep their type (a bool stays a
bool, an int an int), non-finite floats become None, numpy values and arrays become Python ones, mappings
get string keys, tuples become lists."""

from __future__ import annotations

import json
import math

import numpy as np

from app.mechanisms.base import _jsonable


def test_values_and_types():
    src = {"votes": np.array([[1.5, np.inf], [0.0, -2.0]]), "idx": [np.int64(3), 4, True, False],
           "p": (0.25, float("nan"), -math.inf, np.float32(0.5)), 7: {"s": "x", "none": None},
           "partitions": [np.array([1, 2]), [3, 4]]}
    got = _jsonable(src)
    assert got == {"votes": [[1.5, None], [0.0, -2.0]], "idx": [3, 4, True, False],
                   "p": [0.25, None, None, 0.5], "7": {"s": "x", "none": None}, "partitions": [[1, 2], [3, 4]]}
    assert [type(v) for v in got["idx"]] == [int, int, bool, bool]
    assert type(got["p"][3]) is float and type(got["votes"][0][0]) is float
    assert json.dumps(got, allow_nan=False)  # JSON-safe


def test_a_subclass_of_a_builtin_goes_through_the_general_checks():
    class Score(float):
        pass

    class Votes(dict):
        pass

    got = _jsonable(Votes({1: Score(math.inf), 2: Score(0.5)}))
    assert got == {"1": None, "2": 0.5} and type(got["2"]) is float
