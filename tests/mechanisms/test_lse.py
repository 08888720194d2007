"""``app.mechanisms.lse.logsumexp1d`` is scipy's logsumexp bit for bit: on random score vectors (sizes
1-300, ties at the top, wide magnitudes, -inf entries as outside a public candidate set; nan, +inf,
overflow, other shapes and dtypes handed to scipy), and through whole white-box token audits (the
chooser's log-probability and the step laws of ``app.audit.gen_noise``, ``logsumexp_rows``: the same
verdicts, trials and e-values with scipy's logsumexp swapped back in)."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from scipy.special import logsumexp

from app.mechanisms.lse import logsumexp1d, logsumexp_rows


def _vectors():
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 5, 8, 20, 21, 64, 300):
        for scale in (1e-3, 1.0, 30.0, 1e4):
            for _ in range(40):
                x = rng.normal(0.0, scale, n)
                yield x
                if n > 1:
                    t = x.copy()
                    t[rng.integers(n, size=2)] = t.max()  # ties at the top
                    yield t
                    yield np.round(x)  # many ties
                    out = x.copy()
                    out[rng.random(n) < 0.5] = -np.inf  # outside the candidates
                    yield out
    big = np.finfo(float).max
    yield from (np.array([big, big]), np.array([-np.inf, -np.inf]), np.array([np.nan, 1.0]),
                np.array([np.inf, 1.0]), np.zeros(0), np.ones((2, 3)), np.ones(4, dtype=np.float32))


def test_logsumexp1d_is_scipys_bit_for_bit():
    n = 0
    for x in _vectors():
        want, got = float(logsumexp(x)), logsumexp1d(x)
        assert (np.isnan(want) and np.isnan(got)) or got == want, (x, got, want)
        n += 1
    assert n > 4000


def test_logsumexp_rows_is_scipys_per_row_bit_for_bit():
    """Each row as scipy's logsumexp of that row: the white-box step laws a / f (f = 1, 1/2, 1/4, 1/10,
    and an alternative's), over candidates of every size; rows with -inf entries and non-finite rows."""
    n = 0
    for x in _vectors():
        if x.ndim != 1 or x.dtype != np.float64 or x.size == 0:
            continue
        with np.errstate(over="ignore"):  # the largest float over 0.1: inf, scipy's fallback
            rows = x[None, :] / np.array([1.0, 0.5, 0.25, 0.1, 0.3])[:, None]
        got = logsumexp_rows(rows)
        for r, g in zip(rows, got):
            want = float(logsumexp(r))
            assert (np.isnan(want) and np.isnan(g)) or g == want, (r, g, want)
            n += 1
    assert n > 20000
    assert logsumexp_rows(np.ones((2, 3), dtype=np.float32)).tolist() == [float(logsumexp(np.ones(3, np.float32)))] * 2


def _scipy(x):
    return float(logsumexp(x))


def _scipy_rows(x):
    return np.array([float(logsumexp(r)) for r in x])


@pytest.mark.parametrize("mech,units,alt,runs", [("clip_softmax", 1, "claimed", 3), ("poe", 2, "no_noise", 20),
                                                 ("clip_softmax", 2, "noise_tenth", 20)])
def test_white_box_token_audits_are_unchanged(mech, units, alt, runs):
    """Audits with logsumexp1d and with scipy's: identical results (verdict, trials, every e-value and
    its history; a correct target's audit runs ~70 trials of 4 steps each, hence only 3 of those)."""
    from app.audit import gen_noise
    from app.mechanisms import clip_softmax
    from tests.audit.test_gen_sequential_tokens import TokenWhiteBoxTarget, _audits, _design

    d = _design(mech, units, tokens=4)
    fast = _audits(TokenWhiteBoxTarget(d, alt, extra_steps=3), d, runs=runs)
    with mock.patch.object(gen_noise, "logsumexp_rows", _scipy_rows), \
            mock.patch.object(clip_softmax, "logsumexp1d", _scipy):
        slow = _audits(TokenWhiteBoxTarget(d, alt, extra_steps=3), d, runs=runs)
    assert [r.verdict for r in fast] == [r.verdict for r in slow]
    for f, s in zip(fast, slow):
        f.seconds = s.seconds = 0.0
        assert f == s
