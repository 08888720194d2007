"""``app/jobs/kinds/canary_view.py`` without a server: which pieces of an attack a result shows."""

from __future__ import annotations

import json

import numpy as np

from app.audit.canaries import Canary, make_canary
from app.audit.gen_queries import resolve_generation_query
from app.audit.queries import resolve_query
from app.jobs.kinds.canary_view import public_attack, public_rows

KEY = b"k" * 32
LABELS = ["yes", "no"]
EX = [("a", "yes"), ("b", "no"), ("c", "no")]


def _shown(view: dict) -> str:
    return json.dumps(view)


def test_brainwash_query_is_the_one_sent_and_its_template():
    t = {"input_prefix": "Q: ", "output_prefix": "A:", "separator": "\n--\n", "io_separator": " | ",
         "label_prefix": "> "}
    c = Canary("heldout", "SECRET held out", "no", index=0)
    a = resolve_query("brainwash", c, LABELS, EX, t)
    demo = "Q: SECRET held out | A:> yes"  # the canary mislabelled (@other: the most frequent other label)
    assert a.query == ("\n--\n".join([demo] * 6 + ["Q: SECRET held out"]))[len("Q: "):]
    view, _ = public_attack(a, query="brainwash", caller_text=False, class_labels=LABELS, key=KEY)
    assert "SECRET" not in _shown(view) and view["query"].count("{canary}") == 7
    assert view["canary"]["heldout_index"] == 0 and view["canary"]["label"] == "no"


def test_a_custom_query_and_a_made_up_label_are_summarised():
    q = {"name": "mine", "query": "SECRETQ {canary}?", "positive": "SECRETPOS", "negative": "@other",
         "instruction": "SECRETINSTR"}
    c = Canary("hex", "00ff00ff00ff00ff", "SECRETLABEL")
    a = resolve_query(q, c, LABELS, EX)
    view, names = public_attack(a, query=q, caller_text=False, class_labels=LABELS, key=KEY)
    assert "SECRET" not in _shown(view), view
    assert view["strategy"] == "custom" and view["query"]["omitted"] == "inline text"
    assert view["positive"] == "{positive}" and view["negative"] == "no"  # @other: a class label
    assert "{canary_label}" in view["labels"] and view["canary"]["text"] == "00ff00ff00ff00ff"
    rows = public_rows([{"trial": 0, "released": "SECRETPOS"}, {"trial": 1, "released": "yes"}], names)
    assert [r["released"] for r in rows] == ["{positive}", "yes"]


def test_repeat_attack_on_a_private_canary_shows_placeholders():
    c = Canary("unigram", "SECRET one two three", "SECRET one two three", tokens=16)
    a = resolve_generation_query("repeat", c)
    view, names = public_attack(a, query="repeat", caller_text=False, class_labels=[], key=None)
    assert "SECRET" not in _shown(view) and "three" not in _shown(view)
    assert view["query"].endswith('"{prefix}"') and view["reference"] == "{reference}"
    assert view["canary"] == {"kind": "unigram", "origin": "dataset.exemplars", "tokens": 16,
                              "chars": len(c.text), "label": {"omitted": "inline text", "count": 1,
                                                               "chars": len(c.text)}}  # no key: no digest


def test_a_server_made_canary_is_shown_with_the_query_as_sent():
    c = make_canary("false_fact", np.random.default_rng(1), label="-")
    c = Canary(c.kind, c.text, c.text)
    a = resolve_generation_query("signal_text", c)
    view, names = public_attack(a, query="signal_text", caller_text=False, class_labels=[], key=KEY)
    assert view["query"] == a.query and view["canary"]["text"] == c.text == view["canary"]["label"]
    assert view["labels"] == list(a.labels) and not names  # the default signal pair is public


def test_the_release_floor_names_a_label_by_its_index_never_its_text():
    """The floor's finding goes into the verdict reason; a two-label query's label may be caller text (a
    label that is not a declared class label): the finding names the index of the result's attack.labels."""
    from app.audit.conformance import release_floor
    from app.audit.noise import rnm_noise

    noise = rnm_noise({"epsilon": 1.0, "delta": 1e-5, "partitions": 5, "shots_per_partition": 2}, 10)
    r = release_floor([1] * 200, ["PRIVATE-canary-label-7f3", "PRIVATE-other-label-9c1"], noise, 5)
    assert not r.conformant and len(r.findings) == 1
    assert "PRIVATE" not in json.dumps(r.to_dict())
    assert r.findings[0].startswith("the query's label 0 (of 0, 1) released 0 of 200 times")
