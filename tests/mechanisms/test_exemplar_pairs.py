"""A dataset's cached exemplars (app.icl.templates.ExemplarPairs) are checked once when built, so the
mechanisms' whole-set pass (normalize_exemplars) takes them as they are: the same pairs as the pass gives."""

from __future__ import annotations

import pytest

from app.icl.templates import ExemplarPairs, as_exemplar
from app.mechanisms.base import normalize_exemplars


class Text(str):
    pass


def test_normalized_pairs_are_the_checked_pairs():
    rows = [(f"input {i}", "a" if i % 2 else "b") for i in range(50)]
    pairs = ExemplarPairs(rows)
    got = normalize_exemplars(pairs)
    assert got == normalize_exemplars(tuple(rows)) == rows and type(got) is list
    assert all(a is b for a, b in zip(got, pairs)) and all(as_exemplar(e) is e for e in pairs)
    got.append(("x", "y"))  # the caller's list: the cached pairs do not change
    assert len(pairs) == 50


@pytest.mark.parametrize("bad", [["in", "a"], ("in", "a", "b"), (Text("in"), "a"), ("in", 1), {"input": "in", "output": "a"}])
def test_anything_but_an_exact_pair_of_strings_is_refused_when_built(bad):
    with pytest.raises(TypeError, match="exemplar 1"):
        ExemplarPairs([("ok", "a"), bad])
