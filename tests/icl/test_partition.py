import numpy as np
import pytest

from app.icl.partition import partition_exemplars


def _check_disjoint(parts, n):
    flat = np.concatenate(parts) if parts else np.array([], dtype=int)
    assert len(set(flat.tolist())) == len(flat), "partitions overlap"
    assert flat.size == 0 or (flat.min() >= 0 and flat.max() < n)


def test_fixed_size_partitions_are_disjoint_and_sized():
    rng = np.random.default_rng(0)
    parts = partition_exemplars(20, 4, 3, rng)
    assert len(parts) == 4 and all(len(p) == 3 for p in parts)
    _check_disjoint(parts, 20)
    # None: as many as divide evenly
    parts = partition_exemplars(10, 3, None, rng)
    assert [len(p) for p in parts] == [3, 3, 3]
    _check_disjoint(parts, 10)


def test_too_many_shots_is_a_clear_error():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="4 x 3 = 12 exceeds the number of exemplars \\(10\\)"):
        partition_exemplars(10, 4, 3, rng)
    with pytest.raises(ValueError, match="exceeds"):
        partition_exemplars(10, 4, 3, rng, poisson=True)
    with pytest.raises(ValueError, match="partitions"):
        partition_exemplars(10, 0, 1, rng)
    with pytest.raises(ValueError):
        partition_exemplars(3, 4, None, rng)
    with pytest.raises(TypeError):
        partition_exemplars(10, 2, 2, np.random.RandomState(0))


def test_fresh_per_call_and_reproducible_by_seed():
    a = partition_exemplars(50, 5, 4, np.random.default_rng(7))
    b = partition_exemplars(50, 5, 4, np.random.default_rng(7))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    rng = np.random.default_rng(7)
    first = partition_exemplars(50, 5, 4, rng)
    second = partition_exemplars(50, 5, 4, rng)  # next query: a new draw
    assert not all(np.array_equal(x, y) for x, y in zip(first, second))


def test_every_exemplar_equally_likely_in_every_slot():
    # n=6, T=2, s=2: P(index i in partition k) = 2/6 for all i, k.
    rng = np.random.default_rng(1)
    draws = 6000
    counts = np.zeros((2, 6))
    for _ in range(draws):
        for k, p in enumerate(partition_exemplars(6, 2, 2, rng)):
            counts[k, p] += 1
    freq = counts / draws
    se = np.sqrt((1 / 3) * (2 / 3) / draws)  # binomial standard error, ~0.006
    assert np.all(np.abs(freq - 1 / 3) < 5 * se), freq


def test_poisson_is_disjoint_with_expected_sizes():
    rng = np.random.default_rng(2)
    n, t, s, draws = 100, 5, 8, 2000
    sizes = np.zeros((draws, t))
    for d in range(draws):
        parts = partition_exemplars(n, t, s, rng, poisson=True)
        assert len(parts) == t
        _check_disjoint(parts, n)
        sizes[d] = [len(p) for p in parts]
    # ContextLeak Alg. 3: p_k = s / |R_k| makes E|E_k| = s for every k (exactly:
    # E[|E_k| | R_k] = |R_k| * s / |R_k|). Per-draw sd <= sqrt(s) ~ 2.8, so the
    # mean over 2000 draws has se ~0.07; allow 5 se.
    assert np.all(np.abs(sizes.mean(axis=0) - s) < 5 * np.sqrt(s / draws)), sizes.mean(axis=0)
    assert sizes.std() > 0.5  # sizes really are random


def test_poisson_default_matches_paper_rate():
    # shots=None: expected size |D|/m (Algorithm 3 verbatim); the last partition takes everything left.
    rng = np.random.default_rng(3)
    sizes = np.array([[len(p) for p in partition_exemplars(40, 4, None, rng, poisson=True)] for _ in range(2000)])
    assert np.all(sizes.sum(axis=1) <= 40)
    # E|E_k| = E min(|R_k|, 10): 10 while the pool holds >= 10 (k < m, almost surely) ...
    assert np.all(np.abs(sizes[:, :3].mean(axis=0) - 10) < 5 * np.sqrt(10 / 2000)), sizes.mean(axis=0)
    # ... and at k = m, p_m = min(1, (|D|/m)/|R|) = 1 whenever |R| <= |D|/m: the rest of the pool
    assert sizes[:, 3].mean() < 10
    assert np.mean(sizes.sum(axis=1) == 40) > 0.3
