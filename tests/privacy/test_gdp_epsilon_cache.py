"""``gdp_epsilon`` is remembered per (mu, delta): the same float as a fresh bisection, an error raised
every time, an unhashable argument computed uncached."""

from __future__ import annotations

import numpy as np
import pytest

from app.privacy import gdp
from app.privacy.errors import PrivacyInputError


def test_remembered_equals_fresh():
    rng = np.random.default_rng(3)
    for mu, delta in zip(rng.uniform(0.01, 20.0, 200), 10.0 ** rng.uniform(-12, -1, 200)):
        fresh = gdp._gdp_epsilon(float(mu), float(delta))
        assert gdp.gdp_epsilon(float(mu), float(delta)) == fresh == gdp.gdp_epsilon(float(mu), float(delta))
    assert gdp.gdp_epsilon(np.array(1.0), 1e-5) == gdp._gdp_epsilon(1.0, 1e-5)  # unhashable: uncached


def test_an_error_is_raised_every_time():
    before = gdp._gdp_epsilon_cached.cache_info().currsize
    for _ in range(2):
        with pytest.raises(PrivacyInputError):
            gdp.gdp_epsilon(1.0, 0.0)
        with pytest.raises(PrivacyInputError):
            gdp.gdp_epsilon(float("nan"), 1e-5)
    assert gdp._gdp_epsilon_cached.cache_info().currsize == before
