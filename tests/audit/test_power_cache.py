"""The Monte Carlo release probability of a canonical vote row is a function of that row alone (its
stream is seeded by the row), so the planner's repeated questions are answered from a cache."""

from __future__ import annotations

import numpy as np

from app.audit import power
from app.audit.noise import VotingNoise


def test_a_rows_estimate_does_not_depend_on_its_neighbours():
    noise = VotingNoise("laplace", scale=2.0, epsilon=1.0, delta=0.0)
    a = np.array([[3.0, 1.0, 0.0]])
    b = np.array([[3.0, 1.0, 0.0], [0.0, 4.0, 0.0], [2.0, 2.0, 0.0]])
    alone = power.release_probability(noise, a, 0)
    with_others = power.release_probability(noise, b, 0)
    assert alone[0] == with_others[0]
    # Monte Carlo, 20,000 draws: within 5 standard errors of a fresh estimate from another stream.
    rng = np.random.default_rng(12345)
    fresh = np.mean(np.argmax(noise.sample(np.broadcast_to(a[0], (200_000, 3)), rng), axis=1) == 0)
    assert abs(alone[0] - fresh) <= 5 * 0.5 / np.sqrt(20_000)


def test_repeated_rows_are_sampled_once(monkeypatch):
    noise = VotingNoise("gaussian", scale=1.7, epsilon=1.0, delta=1e-5)
    calls = []
    real = VotingNoise.sample
    monkeypatch.setattr(VotingNoise, "sample", lambda self, v, rng: calls.append(1) or real(self, v, rng))
    power._mc_release.cache_clear()
    votes = np.array([[5.0, 2.0, 1.0], [5.0, 1.0, 2.0], [0.0, 6.0, 2.0]])  # rows 1 and 2: one canonical row
    first = power.release_probability(noise, votes, 0)
    assert len(calls) == 2 and first[0] == first[1]
    again = power.release_probability(noise, votes, 0)
    assert len(calls) == 2 and np.array_equal(first, again)
