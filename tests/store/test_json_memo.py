"""The engines' JSON serializer (app.store.db.json_dumps) is ``json.dumps``: a long list of floats' text is
remembered by the floats' bits, and only a bit-identical list gets it back."""

from __future__ import annotations

import json
import math

import numpy as np

from app.store import db


def test_equal_to_json_dumps_for_every_kind_of_value():
    curve = [float(x) for x in np.linspace(0.001, 40.0, 156)]
    values = [curve, list(curve), [0.0] * 156, [-0.0] * 156, [1] * 40, [1.0] * 40, [True] * 40,
              curve[:31], [math.inf] * 40, [math.nan] * 40, curve + [None], {"rdp": curve}, "x", 3, None,
              [{"a": 1.5}] * 40]
    for _ in range(2):  # computed, then remembered
        for v in values:
            assert db.json_dumps(v) == json.dumps(v), v


def test_only_bit_identical_lists_share_a_text():
    assert db.json_dumps([0.0] * 40) == json.dumps([0.0] * 40)
    assert db.json_dumps([-0.0] * 40) == json.dumps([-0.0] * 40) != json.dumps([0.0] * 40)
    a = [0.1 * i for i in range(40)]
    b = list(a)
    b[7] = math.nextafter(b[7], 1.0)
    assert db.json_dumps(a) == json.dumps(a) and db.json_dumps(b) == json.dumps(b) != json.dumps(a)


def test_the_memo_is_bounded():
    for i in range(db._CURVES_SIZE * 3):
        db.json_dumps([float(i)] * 40)
    assert len(db._CURVES) <= db._CURVES_SIZE
