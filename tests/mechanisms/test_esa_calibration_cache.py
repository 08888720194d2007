"""esa solves its Gaussian calibration once per distinct (epsilon, delta, sensitivity, method), as rnm
does: the remembered noise equals a fresh calibration, and a calibration that fails still fails every
time."""

from __future__ import annotations

import pytest

from app.mechanisms import esa
from app.mechanisms.errors import MechanismParamError
from app.privacy.calibration import calibrate_gaussian


@pytest.mark.parametrize("method", ["analytic", "classical", "rdp"])
def test_remembered_noise_equals_a_fresh_calibration(method):
    eps = 0.9 if method == "classical" else 2.0
    fresh = esa.calibrate_noise.__wrapped__(eps, 1e-5, 0.25, method)
    cal = calibrate_gaussian(eps, 1e-5, sensitivity=0.25, method=method)
    for _ in range(2):  # computed, then remembered
        noise = esa.calibrate_noise(eps, 1e-5, 0.25, method)
        assert noise == fresh and (noise.sigma, noise.epsilon, noise.warnings) == (cal.value, cal.epsilon,
                                                                                     tuple(cal.warnings))
    assert esa.calibrate_noise(eps * 1.1, 1e-5, 0.25, method).sigma < noise.sigma  # another epsilon: another entry


def test_a_failing_calibration_fails_every_time():
    before = esa.calibrate_noise.cache_info().currsize
    for _ in range(2):
        with pytest.raises(MechanismParamError):
            esa.calibrate_noise(1.0, 0.0, 0.25, "analytic")
    assert esa.calibrate_noise.cache_info().currsize == before
