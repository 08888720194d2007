"""The degenerate-demonstration filter of synthetic sets (issue 29, item 6; app/mechanisms/synth_filter.py).
The issue's examples from /ui ('A', "'I", '79.8 Celsius (2') and the bundled benchmark's junk are dropped,
usable demonstrations (apostrophes, times, numbers, quoted titles, non-ASCII letters) are kept."""

from __future__ import annotations

import numpy as np
import pytest

from app.mechanisms import synthesize as syn
from app.mechanisms.synth_filter import REASONS, degenerate_reason, filter_demonstrations, short_labels


@pytest.mark.parametrize("text, reason", [
    ("A", "too_short"),
    ("'I", "too_short"),
    ("'A'", "too_short"),
    ("79.8 Celsius (2", "truncated"),
    ("", "empty"),
    ("   \n ", "empty"),
    ("7", "too_short"),
    ("... ---", "too_short"),
    ("httpss06363.n", "non_words"),
    ("$$$ %%% abc", "non_words"),
    ("12345 6789 ab", "non_words"),
    ('He said "hi', "truncated"),
    ("Play 'Yesterday", "truncated"),
    ("Set the [kitchen lights", "truncated"),
])
def test_degenerate_texts_are_dropped_with_their_reason(text, reason):
    assert degenerate_reason(text) == reason


@pytest.mark.parametrize("text", [
    "I'm going to play the music.",
    "I'm going to the bathroom at 6:30",
    "Please allow a minute for the light to warm up.",
    "Call 555-1234 now",
    "Set an alarm for 6am",
    "the students' books",
    "Turn on the lights (kitchen)",
    "Play 'Yesterday' by the Beatles",
    'Play "Yesterday" by the Beatles',
    "Weather in São Paulo?",
    "OK",
    "Refund",
    "Turn it up to 11",
])
def test_usable_demonstrations_are_kept(text):
    assert degenerate_reason(text) is None


def test_filter_counts_per_reason_and_label_drops_duplicates_and_keeps_order():
    ex = [("A", "music"), ("Play some jazz", "music"), ("play  some JAZZ", "music"), ("'I", "alarm"),
          ("79.8 Celsius (2", "weather"), ("Will it rain today?", "weather"), ("", "alarm"),
          ("Wake me at 7", "alarm")]
    r = filter_demonstrations(ex, ["music", "alarm", "weather", "lights"])
    assert r.kept == [("Play some jazz", "music"), ("Will it rain today?", "weather"), ("Wake me at 7", "alarm")]
    assert r.dropped == {"empty": 1, "too_short": 2, "non_words": 0, "truncated": 1, "duplicate": 1}
    assert set(r.dropped) == set(REASONS) and r.dropped_total == 5
    assert r.kept_per_label == {"music": 1, "alarm": 1, "weather": 1, "lights": 0}
    assert r.reasons == ["too_short", None, "duplicate", "too_short", "truncated", None, "empty", None]
    # a label with under half the requested demonstrations (none included) is reported as short
    assert short_labels(r.kept_per_label, 2) == ["lights"]
    assert short_labels(r.kept_per_label, 4) == ["music", "alarm", "weather", "lights"]


def test_a_label_keeps_its_last_demonstration_against_truncated_or_duplicate():
    """The bench_amortized case (total eps 1): two labels whose only texts were cut off inside a quote lost
    every demonstration and synthetic ICL fell from 0.78 to 0.40; now such a text stays when it is all a
    label has. Empty, too-short and non-word texts still go."""
    ex = [('Use an exact date and time. "Fix laten', "weather"), ('"Edualimu - eidoo al-', "music"),
          ("79.8 Celsius (2", "weather"), ("Dim the lights", "lights"), ("Dim the lights", "lights"),
          ("A", "alarm"), ("httpss06363.n", "alarm"), ("Play jazz (live", "shopping"), ("Buy milk", "shopping")]
    r = filter_demonstrations(ex, ["weather", "music", "lights", "alarm", "shopping"])
    assert r.kept == [('Use an exact date and time. "Fix laten', "weather"), ('"Edualimu - eidoo al-', "music"),
                      ("Dim the lights", "lights"), ("Buy milk", "shopping")]
    assert r.dropped == {"empty": 0, "too_short": 1, "non_words": 1, "truncated": 2, "duplicate": 1}
    assert r.kept_per_label == {"weather": 1, "music": 1, "lights": 1, "alarm": 0, "shopping": 1}
    # only duplicates: the first of them stays (it is not a duplicate of anything kept)
    assert filter_demonstrations([("Buy milk", "shopping"), ("buy  milk", "shopping")]).kept == [
        ("Buy milk", "shopping")]


def test_synthesize_applies_the_filter_and_the_cost_does_not_change(monkeypatch):
    """synthesize() drops degenerate texts (internals say which and why, the result counts them) and its
    charge is the same with and without the filter: post-processing. The decoding is replaced by fixed
    texts (the real model's synthesis is tests/mechanisms/test_synthesize.py)."""
    texts = iter(["A", "Play some jazz", "play some jazz", "79.8 Celsius (2", "Will it rain today?", ""])

    class Out:
        def __init__(self, text):
            self.text, self.token_ids, self.steps, self.finish_reason = text, [1] * max(1, len(text)), [{}], "stop"

    monkeypatch.setattr(syn, "decode", lambda *a, **k: Out(next(texts)))
    monkeypatch.setattr(syn, "eos_ids", lambda lm: {0})
    labels = ["music", "weather"]
    exemplars = [(f"x{i}", labels[i % 2]) for i in range(16)]
    cfg = syn.plan(epsilon=4.0, delta=1e-5, labels=labels, label_counts={"music": 8, "weather": 8},
                   shots_per_label=3, max_tokens=8, partitions=4)
    res = syn.synthesize(object(), exemplars, cfg, rng=np.random.default_rng(0))
    assert res.examples == [("Play some jazz", "music"), ("Will it rain today?", "weather")]
    assert res.dropped == {"empty": 1, "too_short": 1, "non_words": 0, "truncated": 1, "duplicate": 1}
    assert res.kept_per_label == {"music": 1, "weather": 1}
    assert [e["dropped"] for e in res.internals["examples"]] == ["too_short", None, "duplicate", "truncated", None,
                                                                 "empty"]
    texts = iter(["A", "Play some jazz", "play some jazz", "79.8 Celsius (2", "Will it rain today?", ""])
    raw = syn.synthesize(object(), exemplars, cfg, rng=np.random.default_rng(0), filter_degenerate=False)
    assert len(raw.examples) == 5 and raw.dropped == {"empty": 1, "too_short": 0, "non_words": 0, "truncated": 0,
                                                      "duplicate": 0}
    assert raw.privacy == res.privacy  # the filter costs nothing
