"""benchmarks/bench_serving.py alternates sequential and concurrent rounds and reports paired ratios
(no server: the HTTP client runs are faked)."""

from __future__ import annotations


import pytest

from tests.scripts import load_script


@pytest.fixture(scope="module")
def bench_mod():
    return load_script("benchmarks/bench_serving.py")


def test_rounds_alternate_and_ratios_pair_each_round(bench_mod, monkeypatch):
    calls: list[tuple[int, int, int]] = []  # (partitions, shots, clients) of every measured run
    # answers/s per run in call order: sequential 2.0, concurrent 3.0; a noise burst halves round 2's
    # sequential run, then a burst slows round 3's concurrent run
    speeds = iter([1.0, 2.0, 3.0, 1.0, 2.5, 2.0, 2.0])  # first: the warm-up

    async def fake_run(url, ds, queries, p, s, n, answers, gen=False):
        calls.append((p, s, n))
        a = next(speeds)
        return {"clients": n, "answers": answers, "wall_s": answers / a, "answers_per_s": a, "p50_s": 1.0 / a,
                "p95_s": 1.5 / a, "calls_per_batch": 1.0, "forward_tokens_per_answer": 80.0,
                "forward_calls_per_answer": 2.0}

    monkeypatch.setattr(bench_mod, "run_clients", fake_run)
    monkeypatch.setattr(bench_mod, "make_dataset", lambda url: ("ds", ["q"]))
    out = bench_mod.bench("http://x", [1, 16], 16, [1, 16], ["rnm 2x1"], rounds=3)
    assert calls == [(2, 1, 1)] + [(2, 1, 1), (2, 1, 16)] * 3  # warm-up, then S, C, S, C, S, C
    rows = out["rnm 2x1"]["rounds"]
    assert [(r["round"], r["clients"]) for r in rows] == [(1, 1), (1, 16), (2, 1), (2, 16), (3, 1), (3, 16)]
    assert [r["ratio_vs_sequential"] for r in rows if r["clients"] == 16] == [1.5, 2.5, 1.0]
    conc = next(s for s in out["rnm 2x1"]["summary"] if s["clients"] == 16)
    assert (conc["ratio_median"], conc["ratio_min"], conc["ratio_max"]) == (1.5, 1.0, 2.5)
    assert conc["answers_per_s_median"] == 2.5


def test_summary_median_odd_and_even_rounds(bench_mod):
    def rows(ratios):
        return [{"clients": 16, "ratio_vs_sequential": x, "answers_per_s": x, "p50_s": 1.0, "p95_s": 1.0,
                 "forward_calls_per_answer": 2.0} for x in ratios]
    assert bench_mod.summarize(rows([3.0, 1.0, 2.0]))[0]["ratio_median"] == 2.0
    even = bench_mod.summarize(rows([4.0, 1.0, 2.0, 3.0]))[0]
    assert even["ratio_median"] == 2.5
    assert (even["answers_per_s_min"], even["answers_per_s_max"]) == (1.0, 4.0)
