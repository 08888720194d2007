"""``mozo``: sampling a product of one-shot outputs mixed with the zero-shot output.

DPS-MOZO (Flemings, Gan, Li, Razaviyayn & Annavaram 2025, "Differentially Private
In-context Learning via Sampling Few-shot Mixed with Zero-shot Outputs", arXiv
2501.19287): each step, every one-shot next-token distribution p_i (one exemplar +
the query) is mixed with the zero-shot distribution p_0 (the query alone, public),
p~_i = lam p_i + (1 - lam) p_0, the token is sampled from the normalised product of
the p~_i, and the privacy comes from that sampling, without added noise. The mixing is
PMixED's (Flemings, Razaviyayn & Annavaram 2024, NAACL, "Differentially Private
Next-Token Prediction of Large Language Models", Sec. 3: an output distribution pulled
towards a public one bounds what one private distribution can change).

What we run per step t (all of it over C_t, the public candidate set):

    C_t   = top-k of p_0(. | template, query, y_<t)  union  {EOS}   (``public_top_k``)
    b     = (1 - mu) p_0|C_t + mu / |C_t|          (the public base; mu = ``uniform_mix``)
    p~_i  = lam_t p_i|C_t + (1 - lam_t) b          (mixing, DPS-MOZO / PMixED)
    q(y) prop. to  prod_i p~_i(y)^w,  w = 1 / (E tau)    (product of the mixed one-shot outputs;
                                                     tau = 1: their geometric mean)

p_i|C and p_0|C are the distributions restricted to C_t and renormalised; E is the
*configured* expert count (``experts``; left out, min(60, n // 4) under replace-one, where n is
public, and the constant 60 under add-remove: ``gen_defaults``). When fewer than E experts can
be built (n < E, ``experts`` given), the missing ones are zero-shot experts (p~ = b): the product always has E factors, so adding an exemplar
swaps a public factor for a private one (without the padding an added factor b^w would
move the log-ratio by w log b(y), which the bound below does not cover -- the random
add-one worlds of tests/mechanisms/generation/test_mozo.py caught exactly that).

The privacy bound is our own derivation, not the papers' theorem. We could read the
two papers' abstracts and PMixED's public code, not DPS-MOZO's analysis; PMixED's code
chooses lam per expert from the private p_i so that a Renyi divergence to p_0 stays
under a target (an RD ball) and adds a data-dependent accounting path. The data-dependent
path is not used; a per-expert lam in a log-ratio ball is ``lambda_mode: "per_expert"``
(below). Ours (worst case over every p_i, data-independent):

    u_i(y) = log p~_i(y) - log b(y)  lies in  [log(1 - lam), log(1 - lam + lam / b(y))]

for ANY p_i (p_i(y) in [0, 1]). A neighbour changes one expert j (swap; an added
exemplar turns a padded zero-shot expert into a private one, also a swap), so log q'(y) - log q(y) = w d(y) - log(Z'/Z)
with d = u_j' - u_j, and the log-ratio's range over y is at most

    eps_tok(lam) = w [ log(1 + lam / ((1 - lam) m_1)) + log(1 + lam / ((1 - lam) m_2)) ]

(m_1 <= m_2 the two smallest base probabilities on C_t; attained by p_j = point mass on
the m_2 token, p_j' = point mass on the m_1 token). That makes the step eps_tok-*bounded
range* (Durfee & Rogers 2019), hence eps_tok-DP and eps_tok^2/8-zCDP (Cesar & Rogers
2021): the same per-token curve as ``poe`` (``poe_decode.per_token_rdp``), composed over
``max_tokens`` steps in the RDP accountant and converted at delta (or basic composition
when smaller).

Calibration: eps_tok comes from the budget before any model call (as ``poe``), and at
every step lam_t is the largest lam with eps_tok(lam) <= eps_tok, solved in closed form
from m_1, m_2 -- quantities of the PUBLIC base b (template, query, released tokens), so
lam_t is a public function too and the charge (fixed before the first step) covers
every step. ``lambda_max`` caps lam_t (a smaller lam only lowers eps_tok(lam)).

Per-expert lam (``lambda_mode: "per_expert"``, PMixED-style; our proof, see docs/generation.md).
PMixED (Sec. 3, and ``pmixed.py`` of james-flemings/pmixed) chooses lam_i per expert from the
PRIVATE p_i so that the mixed p~_i stays in a ball around the public distribution, a
constraint that holds for EVERY dataset, so the resulting bound is still worst case. Our
ball is the log-ratio range (not PMixED's Renyi ball, whose bound is for an average, not
a product): lam_i is the largest lam <= ``lambda_max`` with

    range_y u_i(y) = log((1 + lam (R_i - 1)) / (1 + lam (r_i - 1))) <= beta = eps_tok / (2 w)

(R_i, r_i = max, min over C_t of p_i|C(y) / b(y); the range is increasing in lam, solved in
closed form). Every other expert's lam_i depends on its own partition only, so a neighbour
changes u_j alone, and log q'(y) - log q(y) = w (u_j' - u_j)(y) - log(Z'/Z) has range over y
at most w (range u_j' + range u_j) <= 2 w beta = eps_tok (a padded zero-shot expert has range
0): the same eps_tok-bounded-range step, the same per-token curve and charge as the public
lam. Worst case p_i (a point mass on the least likely base token) gives back the public
lam of a uniform base; any other p_i gets a larger lam_i. The lam_i are private (they are
only in white-box internals, as their mean). The DPS-MOZO paper's own theorem (its Renyi
analysis, subsampling, online/offline modes) could not be read here (only its abstract
and introduction), so none of it is implemented or cited as a theorem.

Subsampling (``subsample: true``, replace-one only; issue 18, third pass). Every exemplar's one-shot
prompt is a decoding row; each step draws a fresh uniformly random E-subset of the n rows WITHOUT
replacement (public randomness, independent of the data) and runs the step above on those E experts
(no padding: E <= n is required, else a 422 naming ``params.subsample``; one exemplar per expert).
The step on a fixed subset is eps_tok-bounded range, hence eps_tok-DP under substitution; over the
random subset it is eps'-DP with eps' = log(1 + (E/n)(e^eps_tok - 1)) (Balle, Barthe & Gaboardi 2018,
NeurIPS, "Privacy Amplification by Subsampling: Tight Analyses via Couplings and Divergences",
Table 1, substitution relation, sampling without replacement; a short proof is in
``app.privacy.subsampling``). The subsampled step is not claimed to be bounded range, so the T steps
are composed as pure-DP events (``PureDPEvent``: min(eps', alpha eps'^2/2, sinh form)) in the RDP
accountant, or basically when smaller; eps_tok is the largest with that cost <= the budget
(bisection keeping the feasible end). The cost depends on n (public here: ``exemplar_count``)
and public parameters only. Under add-remove n changes between neighbours: refused (422). Cost
of the implementation: n rows are decoded per step (the unsampled ones too), so it is n/E times
the work of the unsubsampled mechanism.

Private prefix, public continuation (``private_tokens`` K <= ``max_tokens``; issue 18, sixth pass). The
budget is spread over K steps instead of ``max_tokens`` (eps_tok from K compositions), and steps K+1 ..
``max_tokens`` are greedy on the zero-shot row alone (the ``zero_shot`` baseline's decoding, conditioned on
the K released tokens): those read no exemplar, so they are post-processing of the released prefix and cost
nothing; the charge is the K-step charge. K is public (a request parameter), never chosen from the answer.
Why: the answers here mostly end well before 32 tokens, yet a 32-step charge thins eps_tok for every token
(0.233 -> 0.165 at eps 2); the private prefix carries what the exemplars teach (format, length), the model
finishes the sentence.

Why ``uniform_mix`` (mu): EOS is always a candidate and p_0(EOS) is often ~1e-8 in
mid-sentence, which would force lam_t ~ 0 (pure zero-shot) at every step. The uniform
share puts every base probability >= mu / |C_t|. mu = 0 is the plain zero-shot mixing of
the paper; the default mu = 1 mixes with the uniform law over the zero-shot candidates
(the zero-shot output then enters through C_t only), which the probe preferred.

White-box audits: q is softmax(a) over C_t with a = w (sum_i log p~_i + pad log b), a Gumbel-argmax over
the statistic (1/E)(sum_i log p~_i + pad log b) at the temperature tau; each private step goes to
``app.mechanisms.step_trace``'s collector (``trace_step``) where an in-process audit set one, never into
the internals. The statistic carries lam and the mixing: an audit that reads it trusts them and tests the
sampling temperature only (``app.audit.gen_noise``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.special import log_softmax, logsumexp

from app.mechanisms import gen_defaults as defaults
from app.mechanisms import sensitivity as sens
from app.mechanisms import step_trace
from app.mechanisms.clip_softmax import gumbel_argmax, public_top_k_param
from app.mechanisms.errors import MechanismParamError
from app.mechanisms.gen_common import (
    GenerationRequest,
    GenerationResult,
    Params,
    build_prompt,
    clean_answer,
    partition,
    require_private,
    stop_strings,
)
from app.mechanisms.gen_decode import decode, eos_ids, public_candidates
from app.mechanisms.poe_decode import bounded_range_privacy, resolve_epsilon_per_token
from app.mechanisms.mozo_config import (
    MozoConfig,
    calibrate_subsampled_per_token,
    subsampled_accountant,
    subsampled_privacy,
    subsampled_total_epsilon,
)
from app.mechanisms.rng import resolve_rng
from app.privacy.adjacency import Adjacency
from app.privacy.subsampling import amplified_epsilon

__all__ = ["MozoConfig", "amplified_epsilon", "calibrate_subsampled_per_token", "subsampled_accountant", "subsampled_total_epsilon"]

if TYPE_CHECKING:
    from app.llm.types import Embedder, LanguageModel

NAME = "mozo"
PARAMS = ("experts", "group_size", "temperature", "uniform_mix", "lambda_max", "epsilon_per_token", "public_top_k",
          "lambda_mode", "subsample", "private_tokens")
LAMBDA_MODES = ("public", "per_expert")
# experts / group_size / lambda_mode / private_tokens left out: data-aware defaults (app/mechanisms/gen_defaults.py)
# Defaults from a probe on 3 held-out test dialogues (test[-3:], never in the reported eval),
# 24 tokens: docs/generation.md, "mozo". tau = 1 (the plain geometric mean) sampled too flat
# (ROUGE-L 0.22 at eps 8 with lam ~ 0.99); a sharper product needs a smaller lam for the same
# eps_tok, which a small candidate set with a uniform base (m = 1/|C|) allows.
DEFAULT_TEMPERATURE = 0.25
DEFAULT_UNIFORM_MIX = 1.0
DEFAULT_PUBLIC_TOP_K: int | None = 10


# ---------------------------------------------------------------------------
# The per-token bound and lam calibration (pure functions, tested against a direct computation)
# ---------------------------------------------------------------------------


def per_token_epsilon(lam: float, weight: float, m1: float, m2: float) -> float:
    """Range bound of the step's log-ratio (module doc): w [log(1 + lam/((1-lam) m1)) + same with m2]."""
    if lam <= 0.0:
        return 0.0
    if lam >= 1.0:
        return math.inf
    r = lam / (1.0 - lam)
    return weight * (math.log1p(r / m1) + math.log1p(r / m2))


def calibrate_lambda(epsilon_per_token: float, weight: float, m1: float, m2: float, lambda_max: float = 1.0) -> float:
    """Largest lam in [0, lambda_max] with per_token_epsilon(lam) <= epsilon_per_token.

    (1 + r/m1)(1 + r/m2) = A = exp(eps/w) is a quadratic in r = lam/(1-lam); its positive root,
    written without cancellation: r = 2(A-1) / (s + sqrt(s^2 + 4(A-1)/(m1 m2))), s = 1/m1 + 1/m2."""
    if not (m1 > 0.0 and m2 > 0.0):
        return 0.0
    a1 = math.expm1(epsilon_per_token / weight)
    if math.isinf(a1):
        return lambda_max if lambda_max < 1.0 else float(np.nextafter(1.0, 0.0))
    s = 1.0 / m1 + 1.0 / m2
    r = 2.0 * a1 / (s + math.sqrt(s * s + 4.0 * a1 / (m1 * m2)))
    lam = min(r / (1.0 + r), lambda_max)
    # Rounding must never put us above the budget: step down until the bound holds. Each step
    # doubles the last relative move, so the loop is bounded; lam = 0 (public only) always holds.
    step = 1e-12
    for _ in range(64):
        if lam <= 0.0 or per_token_epsilon(lam, weight, m1, m2) <= epsilon_per_token:
            return max(lam, 0.0)
        lam = float(np.nextafter(lam, 0.0)) * (1.0 - min(step, 1.0))
        step *= 2.0
    return 0.0


def base_distribution(public_logits: np.ndarray, candidates: np.ndarray, uniform_mix: float) -> np.ndarray:
    """b = (1 - mu) p_0|C + mu / |C| over the candidate ids (public row only)."""
    z = np.asarray(public_logits, dtype=np.float64).reshape(-1)[candidates]
    p0 = np.exp(z - logsumexp(z))
    return (1.0 - uniform_mix) * p0 + uniform_mix / candidates.size


def two_smallest(b: np.ndarray) -> tuple[float, float]:
    s = np.sort(np.asarray(b, dtype=np.float64))
    return float(s[0]), float(s[1] if s.size > 1 else s[0])


def ratio_range(lam: float, r_max: float, r_min: float) -> float:
    """range_y log(lam r(y) + 1 - lam) for ratios r = p_i/b in [r_min, r_max]: the log-ratio range of p~_i to b."""
    lo = (1.0 - lam) + lam * r_min  # not log1p(lam (r - 1)): lam -> 1 with r -> 0 must not round to log(0)
    if not lo > 0.0:
        return math.inf
    return math.log((1.0 - lam) + lam * r_max) - math.log(lo)


def per_expert_lambda(beta: float, r_max: float, r_min: float, lambda_max: float = 1.0) -> float:
    """Largest lam in [0, lambda_max] with ratio_range(lam, r_max, r_min) <= beta (r_min <= 1 <= r_max).

    (1 + lam (R - 1)) = e^beta (1 + lam (r - 1))  =>  lam = (e^beta - 1) / ((R - 1) + e^beta (1 - r))."""
    den = (r_max - 1.0) + math.exp(beta) * (1.0 - r_min)
    if not den > 0.0:  # p_i = b on C: any lam leaves p~_i = b
        return lambda_max
    lam = min(math.expm1(beta) / den, lambda_max)
    for _ in range(64):  # rounding must never put p~_i outside the ball
        if ratio_range(lam, r_max, r_min) <= beta:
            return lam
        lam *= 1.0 - 1e-9
    lo, hi = 0.0, lam  # (not reached in the tests) plain bisection from the safe side
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ratio_range(mid, r_max, r_min) <= beta else (lo, mid)
    return lo


def per_expert_lambdas(private_logits: np.ndarray, candidates: np.ndarray, base: np.ndarray,
                       epsilon_per_token: float, weight: float, lambda_max: float = 1.0) -> np.ndarray:
    """lam_i per expert (``lambda_mode`` per_expert): each p~_i within log-ratio range eps_tok / (2 w) of b."""
    z = np.asarray(private_logits, dtype=np.float64)
    if z.ndim == 1:
        z = z[None, :]
    lr = log_softmax(z[:, candidates], axis=1) - np.log(base)[None, :]
    beta = epsilon_per_token / (2.0 * weight)
    return np.array([per_expert_lambda(beta, float(np.exp(row.max())), float(np.exp(row.min())), lambda_max)
                     for row in lr], dtype=np.float64)


def mixed_log_probs(private_logits: np.ndarray, candidates: np.ndarray, base: np.ndarray,
                    lam: float | np.ndarray) -> np.ndarray:
    """log p~_i(y) = log(lam p_i|C(y) + (1 - lam) b(y)), shape (E, |C|); lam a float or one per expert."""
    z = np.asarray(private_logits, dtype=np.float64)
    if z.ndim == 1:
        z = z[None, :]
    lp = log_softmax(z[:, candidates], axis=1)
    lb = np.log(base)[None, :]
    if isinstance(lam, np.ndarray):
        li = lam.reshape(-1, 1)
        with np.errstate(divide="ignore"):
            per: np.ndarray = np.logaddexp(np.log(li) + lp, np.log1p(-li) + lb)
        return per
    if lam <= 0.0:
        return np.broadcast_to(lb, lp.shape).copy()
    if lam >= 1.0:  # no mixing (never produced by the calibration; the tests' broken variant)
        return lp
    return np.logaddexp(math.log(lam) + lp, math.log1p(-lam) + lb)


def step_log_probs(private_logits: np.ndarray, candidates: np.ndarray, base: np.ndarray, lam: float | np.ndarray,
                   weight: float, pad: int = 0) -> np.ndarray:
    """log q over the candidates: w (sum_i log p~_i + pad log b), normalised.

    ``pad`` = E - (experts actually built): the missing experts are zero-shot experts (p~ = b), so
    the product always has E factors and an added exemplar swaps a public factor for a private
    one (the swap bound) instead of adding a factor b^w whose range the bound does not cover."""
    a = weight * mixed_log_probs(private_logits, candidates, base, lam).sum(axis=0)
    if pad:
        a = a + weight * pad * np.log(base)
    return a - logsumexp(a)


# ---------------------------------------------------------------------------
# Configuration and accounting
# ---------------------------------------------------------------------------


def _subsample_param(p: Params) -> bool:
    v = p.get("subsample", False)
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    raise MechanismParamError(f"must be true or false, got {v!r}", param="params.subsample")


def private_tokens_param(p: Params, max_tokens: int) -> int:
    """``private_tokens`` K (default min(16, ``max_tokens``), gen_defaults): the steps the budget is spread
    over; steps after K continue greedily from the zero-shot row alone (0-DP), so the charge is K compositions."""
    k = p.count("private_tokens", defaults.default_private_tokens(max_tokens))
    if k > max_tokens:
        raise MechanismParamError(f"must be at most max_tokens ({max_tokens}), got {k}", param="params.private_tokens")
    return k


def configure(req: GenerationRequest) -> MozoConfig:
    eps = require_private(req, NAME)
    p = Params(req.params, PARAMS)
    top_k = public_top_k_param(p, DEFAULT_PUBLIC_TOP_K)
    if _subsample_param(p):
        return _configure_subsampled(req, p, eps, top_k)
    tau = p.positive("temperature", DEFAULT_TEMPERATURE)
    mu = p.nonnegative("uniform_mix", DEFAULT_UNIFORM_MIX)
    if mu > 1.0:
        raise MechanismParamError(f"must be in [0, 1], got {mu:g}", param="params.uniform_mix")
    lam_max = p.positive("lambda_max", 1.0, upper=1.0)
    mode = p.choice("lambda_mode", defaults.DEFAULT_LAMBDA_MODE, LAMBDA_MODES)
    k = private_tokens_param(p, req.max_tokens)
    et = resolve_epsilon_per_token(p, eps, k, req.delta)
    # Left-out experts / group_size follow the dataset and the measured best (gen_defaults module doc).
    e, weight_experts, g = defaults.mozo_units(req, p, eps, et, k)
    # Swap bound always (as poe): it also covers an added expert, since w does not depend on n.
    change = sens.unit_change(req.adjacency, exemplars_per_unit=g, uses_every_exemplar=False)
    return MozoConfig(e, weight_experts, g, tau, mu, lam_max, et, k, change, top_k, mode,
                      max_tokens=req.max_tokens)


def _configure_subsampled(req: GenerationRequest, p: Params, eps: float, top_k: int | None) -> MozoConfig:
    """``subsample: true``: E one-shot experts from a fresh uniform E-subset of the n exemplars each step.

    Replace-one only: the amplification (and the public n it depends on) is for the substitution
    relation; under add-remove n itself changes between neighbours. One exemplar per expert: the
    experts are rebuilt every step from the prompts of single exemplars."""
    n = len(req.exemplars)
    if sens.parse_adjacency(req.adjacency) != Adjacency.REPLACE_ONE:
        raise MechanismParamError(
            "subsampling is analysed for the replace-one (substitution) relation only (sampling without "
            "replacement, Balle, Barthe & Gaboardi 2018); use adjacency 'replace-one' or subsample false",
            param="params.subsample",
        )
    if n < 1:
        raise MechanismParamError("the dataset has no exemplars", param="dataset_id")
    if p.count("group_size", 1) != 1:
        raise MechanismParamError("must be 1 with subsample (one exemplar per expert)", param="params.group_size")
    e = p.count("experts", defaults.SUBSAMPLE_DEFAULT_EXPERTS)
    if e > n:
        raise MechanismParamError(
            f"subsampling {e} experts needs at least {e} exemplars, the dataset has {n} "
            "(lower params.experts or set subsample false)",
            param="params.subsample",
        )
    tau = p.positive("temperature", DEFAULT_TEMPERATURE)
    mu = p.nonnegative("uniform_mix", DEFAULT_UNIFORM_MIX)
    if mu > 1.0:
        raise MechanismParamError(f"must be in [0, 1], got {mu:g}", param="params.uniform_mix")
    lam_max = p.positive("lambda_max", 1.0, upper=1.0)
    change = sens.unit_change(req.adjacency, exemplars_per_unit=1, uses_every_exemplar=False)
    mode = p.choice("lambda_mode", defaults.DEFAULT_LAMBDA_MODE, LAMBDA_MODES)
    rate = e / n
    k = private_tokens_param(p, req.max_tokens)
    if p.given("epsilon_per_token"):
        et = p.given_positive("epsilon_per_token")
        got = subsampled_total_epsilon(et, rate, k, req.delta)
        if got > eps * (1 + 1e-9):
            raise MechanismParamError(
                f"epsilon_per_token {et:g} costs epsilon {got:.4g} over {k} subsampled tokens "
                f"> the budget {eps:g}",
                param="params.epsilon_per_token",
            )
    else:
        et = calibrate_subsampled_per_token(eps, req.delta, k, rate)
    return MozoConfig(e, e, 1, tau, mu, lam_max, et, k, change, top_k, mode, population=n, max_tokens=req.max_tokens)


def privacy(cfg: MozoConfig, req: GenerationRequest) -> dict[str, Any]:
    if cfg.subsample:
        return subsampled_privacy(cfg.epsilon_per_token, cfg.sample_rate, cfg.tokens, req.delta, req.adjacency,
                                  NAME, cfg.to_dict())
    return bounded_range_privacy(cfg.epsilon_per_token, cfg.tokens, req.delta, req.adjacency, NAME, cfg.to_dict())


# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------


def step_law(cfg: MozoConfig, logits: np.ndarray, public_logits: np.ndarray,
             eos: Any) -> tuple[np.ndarray, np.ndarray, float | np.ndarray, float]:
    """One step's public candidates C_t, log q over them (``step_log_probs``: the law the token is drawn
    from), lam (one, or one per expert) and the base's smallest probability (module doc)."""
    v = np.asarray(public_logits).reshape(-1).size
    cand = (np.arange(v) if cfg.public_top_k is None
            else public_candidates(public_logits, cfg.public_top_k, sorted(eos)))
    base = base_distribution(public_logits, cand, cfg.uniform_mix)
    m1, m2 = two_smallest(base)
    lam: float | np.ndarray
    if cand.size <= 1:
        lam = 0.0
    elif cfg.lambda_mode == "per_expert":
        lam = per_expert_lambdas(logits, cand, base, cfg.epsilon_per_token, cfg.weight, cfg.lambda_max)
    else:
        lam = calibrate_lambda(cfg.epsilon_per_token, cfg.weight, m1, m2, cfg.lambda_max)
    return cand, step_log_probs(logits, cand, base, lam, cfg.weight, pad=cfg.weight_experts - cfg.experts), lam, m1


def trace_step(cand: np.ndarray, log_q: np.ndarray, vocab: int, temperature: float, token: int) -> None:
    """Hand the step to an in-process white-box audit's collector where one is set (``step_trace``; never
    into the internals): q = softmax(a) over C_t with a = log q = w (sum_i log p~_i + pad log b) - log Z,
    w = 1/(E tau), i.e. a Gumbel-argmax over the statistic (1/E)(sum_i log p~_i + pad log b) at the
    temperature tau the mechanism samples at (-inf outside C_t)."""
    if step_trace.active():
        scores = np.full(int(vocab), -np.inf)
        scores[cand] = log_q
        step_trace.record(scores, temperature, token)


def chooser(cfg: MozoConfig, rng: np.random.Generator, eos: Any) -> Any:
    def choose(logits: np.ndarray, public_logits: np.ndarray | None = None) -> tuple[int, dict[str, Any]]:
        if public_logits is None:
            raise RuntimeError("mozo needs the public zero-shot row")
        subset: np.ndarray | None = None
        if cfg.subsample:
            # Public randomness, independent of the data: a fresh uniform E-subset of the n one-shot
            # rows (row i = exemplar i), without replacement; the step below sees those rows only.
            rows = np.asarray(logits)
            if rows.ndim == 1 or rows.shape[0] != cfg.population:
                raise RuntimeError("subsampled mozo needs one row per exemplar")
            subset = np.sort(rng.choice(rows.shape[0], size=cfg.experts, replace=False))
            logits = rows[subset]
        cand, lq, lam, m1 = step_law(cfg, logits, public_logits, eos)
        i = gumbel_argmax(lq, rng)
        tok = int(cand[i])
        trace_step(cand, lq, np.asarray(public_logits).reshape(-1).size, cfg.temperature, tok)
        info: dict[str, Any] = {"token": tok, "log_prob": float(lq[i]), "max_prob": float(np.exp(lq.max())),
                                "candidates": int(cand.size), "lambda": float(np.mean(lam)), "base_min": m1}
        if subset is not None:
            info["subset"] = [int(x) for x in subset]
        return tok, info

    return choose


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
    # With ``subsample`` every exemplar's one-shot prompt is a row (the chooser draws E of them per step).
    units = ([[i] for i in range(len(req.exemplars))] if cfg.subsample
             else partition(len(req.exemplars), cfg.experts, cfg.group_size, g))
    prompts = [build_prompt(lm, req.template, [req.exemplars[i] for i in u], req.query) for u in units]
    public = build_prompt(lm, req.template, [], req.query)
    out = decode(lm, prompts, chooser(cfg, g, eos_ids(lm)), req.max_tokens, stops=stop_strings(lm),
                 reencode=reencode, public_prompt=public,
                 private_steps=cfg.tokens if cfg.continues_publicly else None)
    lams = [s["lambda"] for s in out.steps if not s.get("public")]  # decode marks the zero-shot steps
    internals = {
        "public_top_k": cfg.public_top_k,
        "candidate_set": ("vocabulary" if cfg.public_top_k is None
                          else "public: zero-shot top-k (template + query + released tokens, no exemplar) + EOS"),
        "experts": units,
        "subsample": cfg.subsample,
        "mean_lambda": float(np.mean(lams)) if lams else None,
        "private_steps": len(lams),
        "public_steps": len(out.steps) - len(lams),
        "steps": out.steps,
    }
    return GenerationResult(clean_answer(out.text), NAME, privacy(cfg, req), internals, out.finish_reason,
                            len(out.token_ids))
