"""A small composable RDP accountant, in the style of Google's dp_accounting.

Events are immutable descriptions of what was released; the accountant adds
their RDP curves on one order grid (ICLInf Thm C.7) and converts to
(epsilon, delta) with the smaller of the Balle et al. 2020 and Mironov 2017
conversions. For histories made only of pure-DP events it also computes basic
composition (sum of epsilons, Dwork & Roth 2014 Thm 3.16) and reports the smaller:
over few steps RDP can lose to it (eps = 1 ten times: 10.0004 by RDP vs 10).

    acc = RdpAccountant()
    acc.compose(GaussianEvent(sigma=5.0, sensitivity=2 ** 0.5), count=10)
    acc.compose(PureDPEvent(0.1))
    cost = acc.privacy_cost(1e-5, mechanism="rnm-gaussian", params={"sigma": 5.0})
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.privacy import _validate as v
from app.privacy.adjacency import Adjacency
from app.privacy.clip_softmax import _rdp_per_token, _sensitivity
from app.privacy.errors import PrivacyInputError
from app.privacy.pld import PldSpec
from app.privacy.rdp import (
    DEFAULT_ORDERS,
    check_rdp_curve,
    convert_rdp,
    parse_orders,
    rdp_exponential_mechanism,
    rdp_gaussian,
    rdp_on_grid,
    rdp_pure_dp,
    rdp_to_delta,
    rdp_zcdp,
)

# ---------------------------------------------------------------------------
# Events
# ---------------------------------------------------------------------------


class DpEvent:
    """Base of the immutable events. ``count`` is the number of repetitions."""

    count: int

    def rdp(self, orders: np.ndarray, adjacency: Adjacency) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def pure_epsilon(self, adjacency: Adjacency) -> float | None:
        """Total pure epsilon (all repetitions) when the event is pure DP, else None."""
        return None

    def zcdp_rho(self, adjacency: Adjacency) -> float | None:
        """A total zCDP rho that the event satisfies (all repetitions), or None."""
        return None

    def pld_spec(self, adjacency: Adjacency) -> PldSpec | None:
        """The event's exact dominating pair for PLD composition (``app.privacy.pld``), or None."""
        return None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": type(self).__name__}
        d.update({k: (list(val) if isinstance(val, tuple) else val) for k, val in self.__dict__.items()})
        return d


def _check_count(count: Any) -> int:
    return v.count(count, "count", minimum=1)


@dataclass(frozen=True)
class GaussianEvent(DpEvent):
    """Gaussian noise N(0, sigma^2 I) on a query of L2 sensitivity ``sensitivity``
    (under the accountant's adjacency). RDP alpha Delta^2/(2 sigma^2) (Mironov 2017, Prop. 7)."""

    sigma: float
    sensitivity: float = 1.0
    count: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", v.positive(self.sigma, "sigma"))
        object.__setattr__(self, "sensitivity", v.nonnegative(self.sensitivity, "sensitivity"))
        object.__setattr__(self, "count", _check_count(self.count))

    def rdp(self, orders: np.ndarray, adjacency: Adjacency) -> np.ndarray:
        return self.count * rdp_gaussian(orders, self.sigma, self.sensitivity)

    def zcdp_rho(self, adjacency: Adjacency) -> float | None:
        r = self.sensitivity / self.sigma  # x * x, not x ** 2: overflow gives inf, not OverflowError
        return self.count * r * r / 2.0

    def pld_spec(self, adjacency: Adjacency) -> PldSpec | None:
        # Exactly (Delta/sigma)-GDP: N(0,1) vs N(Delta/sigma,1) (Dong, Roth & Su 2022, Thm 2.7).
        mu = self.sensitivity / self.sigma
        return PldSpec("gaussian", mu, self.count) if mu > 0 and math.isfinite(mu) else None


@dataclass(frozen=True)
class ZCDPEvent(DpEvent):
    """rho-zCDP release; RDP rho * alpha (ICLInf Thm C.3)."""

    rho: float
    count: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "rho", v.nonnegative(self.rho, "rho"))
        object.__setattr__(self, "count", _check_count(self.count))

    def rdp(self, orders: np.ndarray, adjacency: Adjacency) -> np.ndarray:
        return self.count * rdp_zcdp(orders, self.rho)

    def zcdp_rho(self, adjacency: Adjacency) -> float | None:
        return self.count * self.rho


@dataclass(frozen=True)
class _EpsilonDPEvent(DpEvent):
    """What every eps-DP release repeated ``count`` times shares: its pure epsilon, and the zCDP rho
    eps^2/2 (Bun & Steinke 2016 Prop. 3.3; for the exponential mechanism ICLInf Thm C.5, first term).
    The subclasses differ in their RDP curves (and the pure event's PLD)."""

    epsilon: float
    count: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", v.nonnegative(self.epsilon, "epsilon"))
        object.__setattr__(self, "count", _check_count(self.count))

    def pure_epsilon(self, adjacency: Adjacency) -> float | None:
        return self.count * self.epsilon

    def zcdp_rho(self, adjacency: Adjacency) -> float | None:
        return self.count * self.epsilon * self.epsilon / 2.0


@dataclass(frozen=True)
class PureDPEvent(_EpsilonDPEvent):
    """An eps-DP release (e.g. Laplace, randomized response, report-noisy-max with
    Gumbel noise). RDP: min(eps, alpha eps^2/2, sinh form) (Bun & Steinke 2016 Prop. 3.3)."""

    def rdp(self, orders: np.ndarray, adjacency: Adjacency) -> np.ndarray:
        return self.count * rdp_pure_dp(orders, self.epsilon)

    def pld_spec(self, adjacency: Adjacency) -> PldSpec | None:
        # Any eps-DP release is dominated by binary randomized response (Kairouz et al. 2015, Thm 3.3).
        return PldSpec("pure", self.epsilon, self.count) if self.epsilon > 0 else None


@dataclass(frozen=True)
class ExponentialMechanismEvent(_EpsilonDPEvent):
    """An eps-DP exponential mechanism; RDP by ICLInf Thm C.5 (Wu et al. 2024 Thm 8)."""

    def rdp(self, orders: np.ndarray, adjacency: Adjacency) -> np.ndarray:
        return self.count * rdp_exponential_mechanism(orders, self.epsilon)


@dataclass(frozen=True)
class ClipSoftmaxEvent(DpEvent):
    """One token of the clipped-logit softmax sampler (ICLInf Algorithm 1), ``count`` tokens.

    Unlike the other events its cost depends on the accountant's adjacency
    (replace-one doubles the sensitivity c/(s tau)); see ``app.privacy.clip_softmax``.
    """

    clip: float
    batch_size: int
    temperature: float
    count: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "clip", v.positive(self.clip, "clip"))
        object.__setattr__(self, "batch_size", v.count(self.batch_size, "batch_size", minimum=1))
        object.__setattr__(self, "temperature", v.positive(self.temperature, "temperature"))
        object.__setattr__(self, "count", _check_count(self.count))

    def _sens(self, adjacency: Adjacency) -> float:
        return _sensitivity(self.clip, self.batch_size, self.temperature, adjacency)

    def rdp(self, orders: np.ndarray, adjacency: Adjacency) -> np.ndarray:
        return self.count * _rdp_per_token(orders, self._sens(adjacency))

    def pure_epsilon(self, adjacency: Adjacency) -> float | None:
        return self.count * 2.0 * self._sens(adjacency)

    def zcdp_rho(self, adjacency: Adjacency) -> float | None:
        x = self._sens(adjacency)
        return self.count * 0.5 * x * x  # ICLInf Thm C.2


@dataclass(frozen=True)
class RDPCurveEvent(DpEvent):
    """A release with a known RDP curve (orders > 1, values >= 0, +inf allowed).

    On another grid the value at the nearest given order >= alpha is used
    (Renyi divergence is non-decreasing in alpha); orders above the largest
    given one get +inf.
    """

    orders: tuple[float, ...]
    rdp_values: tuple[float, ...]
    count: int = 1

    def __post_init__(self) -> None:
        o, r = check_rdp_curve(self.orders, self.rdp_values)
        object.__setattr__(self, "orders", tuple(float(x) for x in o))
        object.__setattr__(self, "rdp_values", tuple(float(x) for x in r))
        object.__setattr__(self, "count", _check_count(self.count))

    def rdp(self, orders: np.ndarray, adjacency: Adjacency) -> np.ndarray:
        return self.count * rdp_on_grid(self.orders, self.rdp_values, orders)


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------


def _json_float(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class PrivacyCost:
    """What a mechanism spent: the (epsilon, delta) guarantee, its adjacency, and the
    accountant's native quantities (RDP curve, zCDP rho) for later composition.

    ``to_dict`` is JSON-safe: non-finite numbers become None (no guarantee).
    """

    epsilon: float
    delta: float
    adjacency: str
    mechanism: str
    params: Mapping[str, Any] = field(default_factory=dict)
    alpha: float | None = None
    method: str | None = None
    orders: tuple[float, ...] | None = None
    rdp: tuple[float, ...] | None = None
    rho: float | None = None
    pld: PldSpec | None = None  # the exact dominating pair, when the event has one (app.privacy.pld)

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilon": _json_float(self.epsilon),
            "delta": float(self.delta),
            "adjacency": str(self.adjacency),
            "mechanism": self.mechanism,
            "params": dict(self.params),
            "alpha": _json_float(self.alpha),
            "method": self.method,
            "orders": list(self.orders) if self.orders is not None else None,
            "rdp": [_json_float(x) for x in self.rdp] if self.rdp is not None else None,
            "rho": _json_float(self.rho),
            "pld": self.pld.to_dict() if self.pld is not None else None,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PrivacyCost:
        eps = d.get("epsilon")
        rdp = d.get("rdp")
        return cls(
            epsilon=math.inf if eps is None else float(eps),
            delta=float(d["delta"]),
            adjacency=str(Adjacency.parse(d["adjacency"]).value),
            mechanism=str(d["mechanism"]),
            params=dict(d.get("params") or {}),
            alpha=d.get("alpha"),
            method=d.get("method"),
            orders=tuple(d["orders"]) if d.get("orders") is not None else None,
            rdp=tuple(math.inf if x is None else float(x) for x in rdp) if rdp is not None else None,
            rho=d.get("rho"),
            pld=PldSpec.from_dict(d["pld"]) if d.get("pld") is not None else None,
        )

    def as_event(self) -> DpEvent:
        """The cost as an event for another accountant (RDP curve if known, else rho, else pure
        eps when delta == 0)."""
        if self.orders is not None and self.rdp is not None:
            return RDPCurveEvent(self.orders, self.rdp)
        if self.rho is not None:
            return ZCDPEvent(self.rho)
        if self.delta == 0.0:
            return PureDPEvent(self.epsilon)
        raise PrivacyInputError("an (epsilon, delta) cost with delta > 0 has no RDP form", param="cost")


@dataclass(frozen=True)
class EpsilonReport:
    epsilon: float
    delta: float
    alpha: float | None
    method: str  # "bbghs" | "mironov" | "basic"
    epsilon_bbghs: float
    epsilon_mironov: float
    epsilon_basic: float | None

    def to_dict(self) -> dict[str, Any]:
        return {k: (_json_float(x) if isinstance(x, float) else x) for k, x in self.__dict__.items()}


# ---------------------------------------------------------------------------
# Accountant
# ---------------------------------------------------------------------------


class RdpAccountant:
    """Composes events on a fixed order grid. Mutable; ``compose`` returns self for chaining."""

    def __init__(self, orders: Any = None, adjacency: Adjacency | str = Adjacency.ADD_REMOVE) -> None:
        self._orders = parse_orders(orders) if orders is not None else np.array(DEFAULT_ORDERS)
        self._adjacency = Adjacency.parse(adjacency)
        self._rdp = np.zeros_like(self._orders)
        self._events: list[tuple[DpEvent, int]] = []
        self._pure_total: float | None = 0.0
        self._rho_total: float | None = 0.0

    # -- composition -------------------------------------------------------
    def compose(self, event: DpEvent, count: int = 1) -> RdpAccountant:
        if not isinstance(event, DpEvent):
            raise PrivacyInputError(f"not a DpEvent: {type(event).__name__}", param="event")
        k = v.count(count, "count", minimum=1)
        self._rdp = self._rdp + k * event.rdp(self._orders, self._adjacency)
        pure = event.pure_epsilon(self._adjacency)
        self._pure_total = None if (pure is None or self._pure_total is None) else self._pure_total + k * pure
        rho = event.zcdp_rho(self._adjacency)
        self._rho_total = None if (rho is None or self._rho_total is None) else self._rho_total + k * rho
        self._events.append((event, k))
        return self

    # -- state ---------------------------------------------------------------
    @property
    def orders(self) -> np.ndarray:
        return self._orders.copy()

    @property
    def rdp(self) -> np.ndarray:
        return self._rdp.copy()

    @property
    def adjacency(self) -> Adjacency:
        return self._adjacency

    @property
    def events(self) -> tuple[tuple[DpEvent, int], ...]:
        """(event, count) pairs in the order composed."""
        return tuple(self._events)

    @property
    def pure_epsilon(self) -> float | None:
        """Basic-composition epsilon when every event so far is pure DP, else None."""
        return self._pure_total if self._events else 0.0

    @property
    def rho(self) -> float | None:
        """A zCDP rho for the whole history (rhos add, Bun & Steinke 2016 Lemma 2.3) when every
        event has one (all but RDP curves), else None. Often looser than the RDP curve."""
        return self._rho_total

    # -- conversion ------------------------------------------------------------
    def epsilon_report(self, delta: float, method: str = "best") -> EpsilonReport:
        """epsilon at ``delta``: the smaller of BBGHS, Mironov and (pure-only) basic composition."""
        d = v.delta_open(delta)
        if not self._events:
            return EpsilonReport(0.0, d, None, "basic", 0.0, 0.0, 0.0)
        if method not in ("best", "bbghs", "mironov"):
            raise PrivacyInputError(f"unknown method {method!r}", param="method")
        conv = convert_rdp(self._orders, self._rdp, d, method)
        eps, used = conv.epsilon, conv.method
        alpha: float | None = conv.alpha
        basic = self._pure_total
        if method == "best" and basic is not None and basic < eps:
            eps, alpha, used = basic, None, "basic"
        return EpsilonReport(eps, d, alpha, used, conv.epsilon_bbghs, conv.epsilon_mironov, basic)

    def get_epsilon(self, delta: float) -> float:
        return self.epsilon_report(delta).epsilon

    def get_epsilon_and_order(self, delta: float) -> tuple[float, float | None]:
        r = self.epsilon_report(delta)
        return r.epsilon, r.alpha

    def get_delta(self, epsilon: float) -> float:
        """Smallest delta at ``epsilon`` (0 when basic composition already gives epsilon)."""
        e = v.nonnegative(epsilon, "epsilon")
        if not self._events:
            return 0.0
        if self._pure_total is not None and self._pure_total <= e:
            return 0.0
        return rdp_to_delta(self._orders, self._rdp, e)[0]

    def privacy_cost(self, delta: float, mechanism: str, params: Mapping[str, Any] | None = None) -> PrivacyCost:
        r = self.epsilon_report(delta)
        return PrivacyCost(
            epsilon=r.epsilon,
            delta=r.delta,
            adjacency=self._adjacency.value,
            mechanism=mechanism,
            params=dict(params or {}),
            alpha=r.alpha,
            method=r.method,
            orders=tuple(float(x) for x in self._orders),
            rdp=tuple(float(x) for x in self._rdp),
            rho=self._rho_total if self._events else 0.0,
        )
