"""``poe`` decoding: Private PoEtry token by token (product of experts + exponential mechanism).

Experts: each exemplar (or group of ``group_size`` exemplars, PoEtry Appendix
B.2) with the query is one prompt. At every step each expert's next-token
log-probabilities over the full vocabulary are clipped from below,
a_e(y) = max(log p_e(y), -c) in [-c, 0], summed over experts,
U(y) = sum_e a_e(y) (the log of the product of experts, PoEtry Eq. 3), and the
token is drawn with P(y) prop. to exp(lam U(y)) (exponential mechanism). The
same token is appended to every expert (incremental decoding, KV cache).

Per token the step is exactly the classification ``poe`` mechanism over the
vocabulary, with its constants (``app.mechanisms.sensitivity``): a neighbour
changes U by a vector of range <= c when an expert is added or removed whole
(add/remove, one exemplar per expert, every exemplar an expert) and <= 2c
otherwise, so lam = eps_tok / c or eps_tok / (2c) makes a token eps_tok-DP.

Composition over ``max_tokens`` tokens. Each token is an exponential mechanism
whose log-probability ratios between neighbours span a range of at most eps_tok
(lam times the utility range): it is eps_tok-*bounded range* (Durfee & Rogers 2019),
hence eps_tok^2/8-zCDP (Cesar & Rogers 2021) -- the same fact that gives the
clip-softmax sampler its rho = (c/(s tau))^2/2 (ICLInf Thm C.2, Amin et al. Lemma 4,
where eps_tok = 2c/(s tau)). Per token the RDP curve is the smallest of that zCDP
line, the exponential-mechanism sinh bound of ICLInf Thm C.5 and eps_tok
(``app.privacy.rdp``); curves add over tokens (Thm C.7) and are converted at delta;
basic composition T eps_tok is reported instead when smaller (few tokens; the cost is
then pure, delta 0). Given a total budget, eps_tok is the largest per-token epsilon
whose composition fits; with delta = 0 that is eps / T.

``public_top_k`` = k (default 20, 0 = whole vocabulary): the exponential mechanism runs over C_t, the zero-shot
prompt's top-k next tokens (+ EOS) given the released prefix, instead of the
vocabulary. C_t depends on public data and earlier outputs only; each a_e(y) is still
in [-c, 0] for y in C_t, so the utility range over C_t is at most the range over the
vocabulary and the per-token eps_tok (bounded range, PoEtry Thm 3.1 / App. B.1) and
every curve above are unchanged: the cost does not depend on k (docs/generation.md,
"Public candidate sets").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.special import log_softmax, logsumexp

from app.mechanisms import sensitivity as sens
from app.mechanisms.clip_softmax import decode_units, gumbel_argmax, public_internals, public_top_k_param
from app.mechanisms.gen_common import (
    GenerationRequest,
    GenerationResult,
    Params,
    clean_answer,
    largest_feasible,
    partition,
    require_private,
    resolve_units,
)
from app.mechanisms.gen_decode import restrict
from app.mechanisms.rng import resolve_rng
from app.privacy.accountant import PrivacyCost, RdpAccountant, RDPCurveEvent
from app.privacy.rdp import DEFAULT_ORDERS, rdp_pure_dp, rdp_zcdp

if TYPE_CHECKING:
    from app.llm.types import Embedder, LanguageModel

NAME = "poe"
PARAMS = ("experts", "group_size", "clip", "epsilon_per_token", "public_top_k")
DEFAULT_PUBLIC_TOP_K: int | None = 20  # as clip_softmax's, by the same measurement
DEFAULT_EXPERTS = 32
DEFAULT_CLIP = 4.0


# ---------------------------------------------------------------------------
# Pure step
# ---------------------------------------------------------------------------


def clipped_utilities(logits: np.ndarray, clip: float) -> np.ndarray:
    """U(y) = sum_e max(log p_e(y), -c) from the experts' raw logits (E, V)."""
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim == 1:
        z = z[None, :]
    return np.maximum(log_softmax(z, axis=1), -clip).sum(axis=0)


def step_scores(logits: np.ndarray, clip: float, inverse_temperature: float,
                candidates: np.ndarray | None = None) -> np.ndarray:
    """lam U(y): the released token's law is softmax of these (-inf outside ``candidates``)."""
    return restrict(inverse_temperature * clipped_utilities(logits, clip), candidates)


def step_log_probs(logits: np.ndarray, clip: float, inverse_temperature: float,
                   candidates: np.ndarray | None = None) -> np.ndarray:
    a = step_scores(logits, clip, inverse_temperature, candidates)
    return a - logsumexp(a)


def sample_token(logits: np.ndarray, clip: float, inverse_temperature: float, rng: np.random.Generator,
                 size: int | None = None, candidates: np.ndarray | None = None) -> Any:
    """Exponential mechanism by Gumbel-max: argmax lam U(y) + Gumbel(1) (over ``candidates``)."""
    return gumbel_argmax(step_scores(logits, clip, inverse_temperature, candidates), rng, size)


# ---------------------------------------------------------------------------
# Accounting
# ---------------------------------------------------------------------------


def per_token_rdp(orders: np.ndarray, epsilon_per_token: float) -> np.ndarray:
    """min(alpha eps^2/8 (bounded range => zCDP), sinh bound of ICLInf Thm C.5, eps) per token."""
    o = np.asarray(orders, dtype=float)
    return np.minimum(rdp_zcdp(o, epsilon_per_token**2 / 8.0), rdp_pure_dp(o, epsilon_per_token))


def accountant(epsilon_per_token: float, tokens: int, adjacency: Any = "replace-one") -> RdpAccountant:
    orders = np.asarray(DEFAULT_ORDERS, dtype=float)
    event = RDPCurveEvent(tuple(orders), tuple(per_token_rdp(orders, epsilon_per_token)))
    return RdpAccountant(orders, adjacency=sens.parse_adjacency(adjacency)).compose(event, count=tokens)


def total_epsilon(epsilon_per_token: float, tokens: int, delta: float) -> float:
    basic = epsilon_per_token * tokens  # Dwork & Roth 2014 Thm 3.16
    if delta <= 0.0:
        return basic
    return min(basic, accountant(epsilon_per_token, tokens).get_epsilon(delta))


def calibrate_per_token(epsilon: float, delta: float, tokens: int) -> float:
    """Largest eps_tok with total_epsilon(eps_tok, tokens, delta) <= epsilon (>= epsilon / tokens)."""
    if delta <= 0.0:
        return epsilon / tokens
    return largest_feasible(lambda e: total_epsilon(e, tokens, delta), epsilon, epsilon / tokens * 0.999, epsilon)


@dataclass(frozen=True)
class PoEDecodeConfig:
    experts: int
    group_size: int
    clip: float
    epsilon_per_token: float
    tokens: int
    change: sens.UnitChange
    public_top_k: int | None = None  # not in to_dict: the cost does not depend on it

    @property
    def inverse_temperature(self) -> float:
        return sens.poe_inverse_temperature(self.epsilon_per_token, self.clip, self.change)

    def to_dict(self) -> dict[str, Any]:
        return {
            "experts": self.experts,
            "group_size": self.group_size,
            "clip": self.clip,
            "epsilon_per_token": self.epsilon_per_token,
            "compositions": self.tokens,
            "unit_change": self.change.value,
            "utility_range": sens.poe_utility_range(self.clip, self.change),
            "inverse_temperature": self.inverse_temperature,
        }


def configure(req: GenerationRequest) -> PoEDecodeConfig:
    eps = require_private(req, NAME)
    p = Params(req.params, PARAMS)
    top_k = public_top_k_param(p, DEFAULT_PUBLIC_TOP_K)
    e, g = resolve_units(len(req.exemplars), p.count("experts", None), p.count("group_size", None),
                         DEFAULT_EXPERTS, 1, "experts", "group_size", adjacency=req.adjacency)
    c = p.positive("clip", DEFAULT_CLIP)
    # Always the swap-unit bound: the unit count comes from n (a default capped by n), so
    # whether an added exemplar adds a unit depends on the private n; the swap bound covers
    # both cases (an added unit moves the aggregate by no more than a swapped one).
    change = sens.unit_change(req.adjacency, exemplars_per_unit=g, uses_every_exemplar=False)
    et = resolve_epsilon_per_token(p, eps, req.max_tokens, req.delta)
    return PoEDecodeConfig(e, g, c, et, req.max_tokens, change, top_k)


def resolve_epsilon_per_token(p: Any, epsilon: float, tokens: int, delta: float) -> float:
    """The per-token bounded-range epsilon: ``params.epsilon_per_token`` when given (refused if its
    composition over ``tokens`` exceeds ``epsilon``), else the largest one that fits (poe and mozo)."""
    from app.mechanisms.errors import MechanismParamError

    if not p.given("epsilon_per_token"):
        return calibrate_per_token(epsilon, delta, tokens)
    et = p.positive("epsilon_per_token", None)
    got = total_epsilon(et, tokens, delta)
    if got > epsilon * (1 + 1e-9):
        raise MechanismParamError(
            f"epsilon_per_token {et:g} costs epsilon {got:.4g} over {tokens} tokens > the budget {epsilon:g}",
            param="params.epsilon_per_token",
        )
    return et


def rdp_or_basic_cost(acc: Any, basic: float, delta: float, adjacency: str, mechanism: str,
                      params: dict[str, Any], *, rdp_method: str, rho: float, pld: Any = None) -> dict[str, Any]:
    """The smaller of ``acc``'s RDP composition converted at ``delta`` and ``basic`` (pure) composition,
    as a cost dict (poe and mozo decoding, mozo's subsampled steps)."""
    rdp_eps, alpha = acc.get_epsilon_and_order(delta) if delta > 0.0 else (math.inf, None)
    use_rdp = rdp_eps < basic
    cost = PrivacyCost(
        epsilon=rdp_eps if use_rdp else basic,
        delta=delta if use_rdp else 0.0,
        adjacency=sens.parse_adjacency(adjacency).value,
        mechanism=mechanism,
        params=params,
        alpha=alpha if use_rdp else None,
        method=rdp_method if use_rdp else "basic",
        orders=tuple(float(x) for x in acc.orders),
        rdp=tuple(float(x) for x in acc.rdp),
        rho=rho,
        pld=pld,
    )
    d = cost.to_dict()
    d["is_private"] = True
    return d


def bounded_range_privacy(epsilon_per_token: float, tokens: int, delta: float, adjacency: str, mechanism: str,
                          params: dict[str, Any]) -> dict[str, Any]:
    """The cost of ``tokens`` releases, each epsilon_per_token-bounded-range (poe and mozo sample one token
    per step that way): the smaller of RDP composition at ``delta`` and basic composition."""
    return rdp_or_basic_cost(accountant(epsilon_per_token, tokens, adjacency), epsilon_per_token * tokens, delta,
                             adjacency, mechanism, params, rdp_method="bounded-range-rdp",
                             rho=tokens * epsilon_per_token**2 / 8.0)  # Cesar & Rogers 2021: eps-BR => eps^2/8-zCDP


def privacy(cfg: PoEDecodeConfig, req: GenerationRequest) -> dict[str, Any]:
    return bounded_range_privacy(cfg.epsilon_per_token, cfg.tokens, req.delta, req.adjacency, NAME, cfg.to_dict())


def run(
    req: GenerationRequest,
    lm: LanguageModel,
    embedder: Embedder | None = None,
    rng: np.random.Generator | None = None,
    *,
    reencode: bool = False,
) -> GenerationResult:
    cfg = configure(req)
    g = resolve_rng(rng)
    units = partition(len(req.exemplars), cfg.experts, cfg.group_size, g)
    lam = cfg.inverse_temperature
    out = decode_units(req, lm, units, lambda z: step_scores(z, cfg.clip, lam), g, cfg.public_top_k, reencode,
                       temperature=1.0 / lam)
    internals = {**public_internals(cfg.public_top_k), "experts": units, "steps": out.steps}
    return GenerationResult(clean_answer(out.text), NAME, privacy(cfg, req), internals, out.finish_reason,
                            len(out.token_ids))
