"""benchmarks/bench_generate.py merge: chunked ROUGE-L runs joined by item index (no model: the runs' JSON
is written here the way bench_rouge writes it)."""

from __future__ import annotations


import numpy as np
import pytest

from tests.scripts import load_script


@pytest.fixture(scope="module")
def bench_mod():
    return load_script("benchmarks/bench_generate.py")


def _run(first: int, **scores: list[float]) -> dict:
    return {"first_item": first, "scores": {k.replace("_at_", "@"): v for k, v in scores.items()}}


def test_merge_joins_items_and_pairs_against_zero_shot_and_goal(bench_mod):
    a = _run(0, zero_shot=[0.2, 0.3, 0.1], full_context=[0.6, 0.5, 0.7], mozo_at_2=[0.5, 0.2, 0.4])
    b = _run(3, zero_shot=[0.4, 0.0], full_context=[0.8, 0.6], mozo_at_2=[0.7, 0.3])
    out = bench_mod.merge_rouge([b, a])["table"]  # order of the runs does not matter
    z = np.array([0.2, 0.3, 0.1, 0.4, 0.0])
    f = np.array([0.6, 0.5, 0.7, 0.8, 0.6])
    x = np.array([0.5, 0.2, 0.4, 0.7, 0.3])
    row = out["mozo@2"]
    assert row["items"] == 5 and row["paired_items"] == 5
    assert row["rouge_l"] == pytest.approx(x.mean())
    assert row["stderr"] == pytest.approx(x.std(ddof=1) / np.sqrt(5))
    d = x - z
    assert row["vs_zero_shot"]["mean"] == pytest.approx(d.mean())
    assert row["vs_zero_shot"]["stderr"] == pytest.approx(d.std(ddof=1) / np.sqrt(5))
    g = x - (z + f) / 2
    assert row["vs_goal"]["mean"] == pytest.approx(g.mean())
    assert row["vs_goal"]["stderr"] == pytest.approx(g.std(ddof=1) / np.sqrt(5))
    assert row["goal"] == pytest.approx(((z + f) / 2).mean())
    assert "vs_zero_shot" not in out["zero_shot"] and out["full_context"]["rouge_l"] == pytest.approx(f.mean())


def test_merge_pairs_only_items_with_both_baselines(bench_mod):
    a = _run(0, zero_shot=[0.2, 0.4], full_context=[0.6, 0.6], mozo_at_2=[0.5, 0.5])
    b = _run(2, mozo_at_2=[0.9])  # a chunk run with --no-baselines: in the mean, not in the pairs
    row = bench_mod.merge_rouge([a, b])["table"]["mozo@2"]
    assert row["items"] == 3 and row["paired_items"] == 2
    assert row["rouge_l"] == pytest.approx(19 / 30)
    assert row["vs_zero_shot"]["mean"] == pytest.approx(0.2)


def test_merge_refuses_overlapping_or_unscored_runs(bench_mod):
    with pytest.raises(SystemExit, match="item 1"):
        bench_mod.merge_rouge([_run(0, zero_shot=[0.1, 0.2]), _run(1, zero_shot=[0.3])])
    with pytest.raises(SystemExit, match="per-item scores"):
        bench_mod.merge_rouge([{"table": {}}])


def test_merge_against_pairs_shared_keys_on_common_items(bench_mod):
    """--against: another setting's runs; paired (this - against) per key on the items both have."""
    new = [_run(0, zero_shot=[0.2, 0.3, 0.1], mozo_at_2=[0.5, 0.2, 0.4]), _run(3, mozo_at_2=[0.6])]
    old = [_run(1, zero_shot=[0.3, 0.1, 0.9], mozo_at_2=[0.1, 0.1, 0.2]), _run(5, mozo_at_4=[0.3])]
    out = bench_mod.merge_rouge(new, old)["table"]
    d = np.array([0.2 - 0.1, 0.4 - 0.1, 0.6 - 0.2])  # items 1, 2, 3
    row = out["mozo@2"]["vs_against"]
    assert row["items"] == 3
    assert row["mean"] == pytest.approx(d.mean()) and row["stderr"] == pytest.approx(d.std(ddof=1) / np.sqrt(3))
    assert out["zero_shot"]["vs_against"]["mean"] == pytest.approx(0.0)  # the same baseline on items 1, 2
    assert "mozo@4" not in out and "vs_against" not in bench_mod.merge_rouge(new)["table"]["mozo@2"]
