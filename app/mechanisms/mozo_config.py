"""mozo's configuration (``MozoConfig``) and its ``subsample: true`` accounting.

Each step draws E of the n exemplars uniformly without replacement (rate q = E / n); a step that is
eps_tok-DP on its subset is log(1 + q (e^eps_tok - 1))-DP on the dataset under replace-one (Balle,
Barthe & Gaboardi 2018, Table 1, substitution; ``app.privacy.subsampling``). ``tokens`` such steps compose as pure-DP
events in RDP, or by basic composition, whichever is smaller. Split out of ``mozo`` (which re-exports
these names) so that the mechanism module stays about the bound and decoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from app.mechanisms import sensitivity as sens
from app.mechanisms.gen_common import largest_feasible
from app.mechanisms.poe_decode import rdp_or_basic_cost
from app.privacy.accountant import PureDPEvent, RdpAccountant
from app.privacy.pld import PldSpec
from app.privacy.rdp import DEFAULT_ORDERS
from app.privacy.subsampling import amplified_epsilon, deamplified_epsilon


@dataclass(frozen=True)
class MozoConfig:
    experts: int
    weight_experts: int  # E in w = 1/(E tau): the configured count, never n
    group_size: int
    temperature: float
    uniform_mix: float
    lambda_max: float
    epsilon_per_token: float
    tokens: int
    change: sens.UnitChange
    public_top_k: int | None = None  # not in to_dict: the cost does not depend on it
    lambda_mode: str = "public"  # "per_expert": lam_i from p_i within the ball (same bound, same cost)
    population: int | None = None  # ``subsample``: n, the (public) exemplar count sampled from each step
    max_tokens: int | None = None  # the answer's length cap; > tokens: greedy zero-shot steps after ``tokens``

    @property
    def subsample(self) -> bool:
        return self.population is not None

    @property
    def sample_rate(self) -> float:
        """q = E / n with ``subsample`` (1 without)."""
        return 1.0 if self.population is None else self.experts / self.population

    @property
    def amplified_epsilon_per_token(self) -> float:
        """The per-step pure-DP epsilon charged: eps_tok, or log(1 + q (e^eps_tok - 1)) with ``subsample``."""
        return amplified_epsilon(self.epsilon_per_token, self.sample_rate)

    @property
    def weight(self) -> float:
        return 1.0 / (self.weight_experts * self.temperature)

    @property
    def continues_publicly(self) -> bool:
        return self.max_tokens is not None and self.max_tokens > self.tokens

    @property
    def public_continuation(self) -> str | None:
        if not self.continues_publicly:
            return None
        return (f"steps {self.tokens + 1}..{self.max_tokens}: greedy from the zero-shot row (query + released "
                "tokens, no exemplar): 0-DP post-processing, not charged")

    def to_dict(self) -> dict[str, Any]:
        d = self._base_dict()
        if self.subsample:
            d.update({
                "subsample": True,
                "population": self.population,
                "sample_rate": self.sample_rate,
                "amplified_epsilon_per_token": self.amplified_epsilon_per_token,
                "amplification": ("each step a fresh uniform E-subset of the n exemplars, without replacement; "
                                  "eps' = log(1 + (E/n)(e^eps_tok - 1)) (Balle, Barthe & Gaboardi 2018, Table 1, "
                                  "substitution), composed as pure-DP events"),
            })
        return d

    def _base_dict(self) -> dict[str, Any]:
        return {
            "experts": self.experts,
            "group_size": self.group_size,
            "temperature": self.temperature,
            "product_weight": self.weight,
            "uniform_mix": self.uniform_mix,
            "lambda_max": self.lambda_max,
            "lambda_mode": self.lambda_mode,
            "lambda": ("per step from the public base: largest lam with the bound <= epsilon_per_token"
                       if self.lambda_mode == "public" else
                       "per step and expert: largest lam_i with log-ratio range of p~_i to b <= epsilon_per_token / (2 w)"),
            "epsilon_per_token": self.epsilon_per_token,
            "compositions": self.tokens,
            "private_tokens": self.tokens,
            "public_continuation": self.public_continuation,
            "unit_change": self.change.value,
            "bound": "worst case over all one-shot distributions (data-independent)",
        }


def subsampled_accountant(epsilon_per_token: float, rate: float, tokens: int,
                          adjacency: Any = "replace-one") -> RdpAccountant:
    """``tokens`` pure-DP events of epsilon log(1 + q (e^eps_tok - 1)) each (RDP of pure DP:
    min(eps', alpha eps'^2/2, sinh form), ``PureDPEvent``). The amplified step is NOT claimed to be
    bounded range, so the eps^2/8 zCDP curve of the unsubsampled step is not used."""
    event = PureDPEvent(amplified_epsilon(epsilon_per_token, rate))
    orders = np.asarray(DEFAULT_ORDERS, dtype=float)
    return RdpAccountant(orders, adjacency=sens.parse_adjacency(adjacency)).compose(event, count=tokens)


def subsampled_total_epsilon(epsilon_per_token: float, rate: float, tokens: int, delta: float) -> float:
    """The charge: min(basic composition tokens * eps', RDP composition converted at delta)."""
    basic = tokens * amplified_epsilon(epsilon_per_token, rate)
    if delta <= 0.0:
        return basic
    return min(basic, subsampled_accountant(epsilon_per_token, rate, tokens).get_epsilon(delta))


def calibrate_subsampled_per_token(epsilon: float, delta: float, tokens: int, rate: float) -> float:
    """Largest eps_tok (bisection keeping the feasible end, as dp_accounting's calibration) with
    subsampled_total_epsilon(eps_tok) <= epsilon; never above the target (checked again at the end)."""
    lo = epsilon / tokens * 0.999  # feasible: eps' <= eps_tok and basic composition
    hi = max(lo, deamplified_epsilon(epsilon, rate) + 1.0)  # eps' > epsilon there: infeasible for tokens >= 1
    et = largest_feasible(lambda e: subsampled_total_epsilon(e, rate, tokens, delta), epsilon, lo, hi)
    if subsampled_total_epsilon(et, rate, tokens, delta) > epsilon:  # pragma: no cover - bisection keeps feasibility
        raise RuntimeError("subsampled calibration exceeded the target")
    return et


def subsampled_privacy(epsilon_per_token: float, rate: float, tokens: int, delta: float, adjacency: str,
                       mechanism: str, params: dict[str, Any]) -> dict[str, Any]:
    """The cost of ``tokens`` amplified pure-DP steps: min(RDP composition at delta, basic)."""
    ep = amplified_epsilon(epsilon_per_token, rate)
    return rdp_or_basic_cost(
        subsampled_accountant(epsilon_per_token, rate, tokens, adjacency), tokens * ep, delta, adjacency, mechanism,
        params, rdp_method="subsampled-pure-dp-rdp",
        rho=tokens * ep**2 / 2.0,  # Bun & Steinke 2016 Prop. 3.3: eps-DP => eps^2/2-zCDP
        # Each amplified step is eps'-DP: the ledger may compose them by PLD (randomized response pair).
        pld=PldSpec("pure", ep, tokens) if ep > 0 and tokens >= 1 else None,
    )
