"""The engines' JSON serializer and deserializer (app.store.json_memo) are ``json.dumps`` and ``json.loads``:
a long list of floats' text is remembered by the floats' bits (also inside a dict, such as a released
body's ``privacy.rdp``), a long number list's parse by its text, and only identical inputs share them."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest

from app.store import db, json_memo

CURVE = [float(x) for x in np.linspace(0.001, 40.0, 156)]


def _values():
    deep: object = CURVE
    for i in range(12):  # deeper than the joined levels: json.dumps of the rest
        deep = {f"k{i}": deep, "n": [i, 1.5]} if i % 2 else [deep, None]
    return [CURVE, list(CURVE), [0.0] * 156, [-0.0] * 156, [1] * 40, [1.0] * 40, [True] * 40,
            CURVE[:31], [math.inf] * 40, [math.nan] * 40, CURVE + [None], {"rdp": CURVE}, "x", 3, None,
            [{"a": 1.5}] * 40, [], {}, [[]], {"a": {}}, {1: CURVE}, {"a": {1: 2}}, {"é\n\"": ["ü", 1e300, -0.0]},
            {"privacy": {"orders": [1.1 + 0.1 * i for i in range(156)], "rdp": CURVE, "epsilon": 1.0},
             "internals": {"votes": [1.0, 7.0], "probs": [[0.2] * 5] * 8}, "label": "music"},
            [CURVE, [CURVE], {"x": CURVE}], (1, 2), [(1.0, 2.0)] * 3, deep, True, 1.5, "a" * 300]


def test_equal_to_json_dumps_for_every_kind_of_value():
    for _ in range(2):  # computed, then remembered
        for v in _values():
            assert json_memo.json_dumps(v) == json.dumps(v), v
    assert db.json_dumps is json_memo.json_dumps  # what the engines are given


def test_equal_to_json_loads_and_a_fresh_list_each_time():
    texts = [json.dumps(v) for v in _values()] + ["[" + ", ".join(["1"] * 100) + "]", "[" + "1.5, " * 99 + "NaN]",
                                                  "  [1.0]", "[" + "0.25, " * 80 + "\"x\"]", "[" + "2, " * 90 + "{}]"]
    for _ in range(2):
        for t in texts:
            got, want = json_memo.json_loads(t), json.loads(t)
            assert json.dumps(got) == json.dumps(want), t[:60]
    first = json_memo.json_loads(json.dumps(CURVE))
    first[0] = -1.0  # a caller changing its list changes no later caller's
    assert json_memo.json_loads(json.dumps(CURVE)) == CURVE
    raw = json.dumps(CURVE).encode()  # psycopg hands bytes
    assert json_memo.json_loads(raw) == CURVE and json.dumps(CURVE) in json_memo._PARSED  # remembered
    bad = b"[" + b"1, " * 100 + b"\xff]"  # not UTF-8: json.loads' own error, as before
    with pytest.raises(UnicodeDecodeError):
        json.loads(bad)
    with pytest.raises(UnicodeDecodeError):
        json_memo.json_loads(bad)


def test_only_bit_identical_lists_share_a_text():
    assert json_memo.json_dumps([0.0] * 40) == json.dumps([0.0] * 40)
    assert json_memo.json_dumps([-0.0] * 40) == json.dumps([-0.0] * 40) != json.dumps([0.0] * 40)
    a = [0.1 * i for i in range(40)]
    b = list(a)
    b[7] = math.nextafter(b[7], 1.0)
    assert json_memo.json_dumps({"rdp": a}) == json.dumps({"rdp": a})
    assert json_memo.json_dumps({"rdp": b}) == json.dumps({"rdp": b}) != json.dumps({"rdp": a})


def test_the_memos_are_bounded():
    for i in range(json_memo._CURVES_SIZE * 3):
        json_memo.json_dumps([float(i)] * 40)
        json_memo.json_loads(json.dumps([float(i)] * 40))
    assert len(json_memo._CURVES) <= json_memo._CURVES_SIZE
    assert len(json_memo._PARSED) <= json_memo._PARSED_SIZE


def test_hostile_nesting_is_json_dumps_not_a_recursion_error():
    v: object = 1
    for _ in range(sys.getrecursionlimit() // 4):
        v = [v]
    assert json_memo.json_dumps(v) == json.dumps(v)
