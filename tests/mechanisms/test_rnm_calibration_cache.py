"""rnm solves its Gaussian calibration once per distinct (epsilon, delta, sensitivity, method) (issue 27):
the plan equals a fresh calibration, and a calibration that fails still fails every time."""

from __future__ import annotations

import pytest

from app.mechanisms import sensitivity as sens
from app.mechanisms.errors import MechanismParamError
from app.mechanisms.rnm import RNMParams, _gaussian_calibration, plan_noise
from app.privacy.calibration import calibrate_gaussian


@pytest.mark.parametrize("method", ["analytic", "classical"])
def test_plan_equals_a_fresh_calibration(method):
    p = RNMParams.from_mapping({"epsilon": 0.7, "delta": 1e-6, "partitions": 8, "shots_per_partition": 4,
                                "calibration": method})
    change = sens.unit_change(p.adjacency, exemplars_per_unit=4, uses_every_exemplar=False)
    l2 = sens.vote_l2_sensitivity(change)
    cal = calibrate_gaussian(0.7, 1e-6, sensitivity=l2, method=method)
    for _ in range(2):  # computed, then remembered
        plan = plan_noise(p, 64)
        assert (plan.scale, plan.epsilon, plan.method) == (cal.value, cal.epsilon, f"gaussian-{cal.method}")
        assert plan.event.sigma == cal.value and plan.warnings == tuple(cal.warnings)
    other = plan_noise(RNMParams.from_mapping({"epsilon": 0.8, "delta": 1e-6, "partitions": 8,
                                               "shots_per_partition": 4, "calibration": method}), 64)
    assert other.scale < plan.scale  # another epsilon is another entry


def test_a_failing_calibration_fails_every_time():
    before = _gaussian_calibration.cache_info().currsize
    for _ in range(2):
        with pytest.raises(MechanismParamError):
            plan_noise(RNMParams.from_mapping({"epsilon": 1.0, "delta": 0.0, "partitions": 2}), 4)
    assert _gaussian_calibration.cache_info().currsize == before
