"""The composable accountant: events, composition, conversions, PrivacyCost."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from dp_accounting import ComposedDpEvent, GaussianDpEvent, SelfComposedDpEvent
from dp_accounting import ZCDpEvent as DpaZCDp
from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp

from app.privacy import (
    Adjacency,
    ClipSoftmaxEvent,
    ExponentialMechanismEvent,
    GaussianEvent,
    PrivacyCost,
    PrivacyInputError,
    PureDPEvent,
    RdpAccountant,
    RDPCurveEvent,
    ZCDPEvent,
    clip_softmax_rdp,
)


def test_composition_matches_dp_accounting():
    ours = RdpAccountant()
    ours.compose(GaussianEvent(sigma=3.0, sensitivity=math.sqrt(2)), count=10).compose(ZCDPEvent(0.05), count=3)
    ref = dpa_rdp.RdpAccountant()
    ref.compose(ComposedDpEvent([
        SelfComposedDpEvent(GaussianDpEvent(3.0 / math.sqrt(2)), 10),
        SelfComposedDpEvent(DpaZCDp(0.05), 3),
    ]))
    np.testing.assert_allclose(ours.rdp, ref._rdp, rtol=1e-12)
    for delta in (1e-5, 1e-8):
        assert ours.get_epsilon(delta) == pytest.approx(ref.get_epsilon(delta), rel=1e-12)
    assert ours.rho == pytest.approx(10 * 2 / (2 * 9) + 3 * 0.05)


def test_pure_history_reports_smaller_of_rdp_and_basic():
    acc = RdpAccountant().compose(PureDPEvent(1.0), count=10)
    r = acc.epsilon_report(1e-5)
    assert r.method == "basic" and r.epsilon == 10.0 and r.epsilon_bbghs == pytest.approx(10.000439, abs=1e-6)
    acc2 = RdpAccountant().compose(PureDPEvent(0.5), count=100)
    r2 = acc2.epsilon_report(1e-5)
    assert r2.method == "bbghs" and r2.epsilon == pytest.approx(32.765522, abs=5e-7)
    assert r2.epsilon_mironov == pytest.approx(34.069858, abs=5e-7) and r2.epsilon_basic == 50.0
    assert acc.get_delta(10.0) == 0.0  # basic composition already gives (10, 0)


def test_mixed_history_has_no_basic_value():
    acc = RdpAccountant().compose(PureDPEvent(0.1)).compose(GaussianEvent(5.0))
    assert acc.pure_epsilon is None and acc.epsilon_report(1e-5).epsilon_basic is None


def test_exponential_mechanism_event_counts_compositions():
    # PRIOR_ART: dp-accounting's unreleased EM event ignores the count; ours must not.
    one = RdpAccountant().compose(ExponentialMechanismEvent(0.2))
    many = RdpAccountant().compose(ExponentialMechanismEvent(0.2, count=50))
    np.testing.assert_allclose(many.rdp, 50 * one.rdp)
    again = RdpAccountant().compose(ExponentialMechanismEvent(0.2), count=50)
    np.testing.assert_allclose(again.rdp, many.rdp)


def test_clip_softmax_event_uses_accountant_adjacency():
    grid = np.array([2.0, 5.0, 20.0])
    ev = ClipSoftmaxEvent(clip=10.0, batch_size=50, temperature=2.0, count=40)
    for adj in ("add-remove", "replace-one"):
        acc = RdpAccountant(orders=grid, adjacency=adj).compose(ev)
        np.testing.assert_allclose(acc.rdp, clip_softmax_rdp(grid, 10.0, 50, 2.0, 40, adj))


def test_rdp_curve_event_on_another_grid():
    acc = RdpAccountant(orders=[2, 3, 4, 16])
    acc.compose(RDPCurveEvent((2.0, 4.0, 8.0), (0.1, 0.2, 0.4)), count=2)
    np.testing.assert_allclose(acc.rdp, [0.2, 0.4, 0.4, math.inf])
    eps, alpha = acc.get_epsilon_and_order(1e-5)
    assert math.isfinite(eps) and alpha in (2, 3, 4)


def test_events_are_immutable_and_validated():
    ev = GaussianEvent(2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ev.sigma = 1.0  # type: ignore[misc]
    for bad in (lambda: GaussianEvent(0.0), lambda: ZCDPEvent(-1.0), lambda: PureDPEvent(math.nan),
                lambda: GaussianEvent(1.0, count=0), lambda: RDPCurveEvent((0.5,), (0.1,))):
        with pytest.raises(PrivacyInputError):
            bad()


def test_privacy_cost_roundtrip_and_json():
    acc = RdpAccountant(adjacency=Adjacency.REPLACE_ONE).compose(GaussianEvent(4.0, math.sqrt(2)), count=5)
    cost = acc.privacy_cost(1e-5, mechanism="rnm-gaussian", params={"sigma": 4.0, "partitions": 10})
    d = cost.to_dict()
    json.dumps(d, allow_nan=False)  # JSON-safe
    assert d["adjacency"] == "replace-one" and d["epsilon"] == pytest.approx(acc.get_epsilon(1e-5))
    assert d["alpha"] is not None and d["rho"] == pytest.approx(5 * 2 / 32)
    back = PrivacyCost.from_dict(d)
    assert back == cost
    # and it composes in another accountant exactly as the original history
    acc2 = RdpAccountant().compose(back.as_event())
    np.testing.assert_allclose(acc2.rdp, acc.rdp)


def test_empty_accountant_is_free():
    acc = RdpAccountant()
    assert acc.get_epsilon(1e-5) == 0.0 and acc.get_delta(0.0) == 0.0


def test_bad_delta():
    with pytest.raises(PrivacyInputError) as ei:
        RdpAccountant().compose(GaussianEvent(1.0)).get_epsilon(0.0)
    assert ei.value.param == "delta"
