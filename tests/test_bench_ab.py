"""benchmarks/bench_ab.py pairs interleaved blocks of two builds (no server: the blocks are faked)."""

from __future__ import annotations

import pytest

from tests.scripts import load_script


@pytest.fixture(scope="module")
def ab():
    return load_script("benchmarks/bench_ab.py")


def test_blocks_run_abba_and_pair_in_order(ab):
    seen: list[tuple[str, int]] = []

    def run_one(build, p):
        seen.append((build, p))
        return (float(len(seen)), 1.0)

    rows = ab.run_blocks(4, run_one)
    assert seen == [("A", 0), ("B", 0), ("B", 1), ("A", 1), ("A", 2), ("B", 2), ("B", 3), ("A", 3)]
    assert rows["A"] == [(1.0, 1.0), (4.0, 1.0), (5.0, 1.0), (8.0, 1.0)]
    assert rows["B"] == [(2.0, 1.0), (3.0, 1.0), (6.0, 1.0), (7.0, 1.0)]


def test_a_steady_drift_cancels_and_a_real_difference_shows(ab):
    def drifting(speedup):  # the machine gets 5% faster every block; B is `speedup` x A
        t = iter(range(100))
        return lambda build, p: ((1.0 + 0.05 * next(t)) * (speedup if build == "B" else 1.0),)

    same = ab.summary(ab.run_blocks(8, drifting(1.0)), 0)
    assert 0.97 < same["ratio_median"] < 1.03 and same["ratio_min"] < 1.0 < same["ratio_max"]
    faster = ab.summary(ab.run_blocks(8, drifting(1.2)), 0)
    assert 1.15 < faster["ratio_median"] < 1.25

