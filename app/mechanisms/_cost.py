"""Build the privacy part of a result from an accountant event (no formulas here:
the RDP curves and conversions live in ``app.privacy``)."""

from __future__ import annotations

from typing import Any, Mapping

from app.privacy.accountant import DpEvent, PrivacyCost, RdpAccountant
from app.privacy.adjacency import Adjacency


def cost_dict(
    event: DpEvent,
    *,
    epsilon: float,
    delta: float,
    adjacency: Adjacency,
    mechanism: str,
    params: Mapping[str, Any],
    method: str,
) -> dict[str, Any]:
    """``PrivacyCost.to_dict()`` with the mechanism's own (epsilon, delta) guarantee (exact
    Gaussian / pure eps, tighter than an RDP conversion) and the event's RDP curve and zCDP
    rho, so that a ledger can compose answers through RDP, and its exact dominating pair when it
    has one, so that the ledger can compose those by PLD (``app.privacy.pld``)."""
    acc = RdpAccountant(adjacency=adjacency).compose(event)
    cost = PrivacyCost(
        epsilon=float(epsilon),
        delta=float(delta),
        adjacency=adjacency.value,
        mechanism=mechanism,
        params=dict(params),
        alpha=None,
        method=method,
        orders=tuple(float(x) for x in acc.orders),
        rdp=tuple(float(x) for x in acc.rdp),
        rho=acc.rho,
        pld=event.pld_spec(adjacency),
    )
    d = cost.to_dict()
    d["is_private"] = True
    return d
