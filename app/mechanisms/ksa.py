"""``ksa``: keyword-space aggregation with propose-test-release (Wu et al. 2024 and its notebook).

1. T disjoint partitions each answer the query (as in ESA).
2. Keyword histogram: every answer contributes each of its keywords once
   (lower-cased word tokens, English stop words and punctuation removed).
3. Choose how many keywords to release: with c_(1) >= c_(2) >= ... the sorted
   counts (zero-padded: a word nobody used has count 0), the gaps
   d_k = c_(k) - c_(k+1) for k = 1..k_max (k_max = 30, a data-independent range),
   and k* = argmax_k d_k + Gumbel (the exponential mechanism on the gaps).
4. Propose-test-release on the gap at k* (notebook form):
   d^ = max(D, d_k*) + N(0, (D sigma)^2) - Phi^-1(1 - delta0) D sigma;
   release the k* most frequent keywords iff d^ > D (the top-k* set is then the
   same on every neighbour), else release nothing.
5. Generate zero-shot with the released keywords as word suggestions; fall back to
   plain zero-shot when the test fails. No exemplar enters this last prompt.

D is the sensitivity of a gap. One exemplar sits in one partition, so one answer
changes arbitrarily (a keyword set removed, another added): every count moves by
at most 1 and a gap by at most D = 2 (the notebook's 2 in ``max(2, d)`` and
``2 sigma``). Only when every exemplar is its own partition and add/remove adds
or drops a whole answer do all counts move the same way, and D = 1 (Zhu & Wang 2022).

Exponential mechanism: a neighbour moves the gap vector by u with
max_k u_k - min_k u_k <= 2D (e.g. gaps (2, 0) -> (0, 2) under one swapped answer),
so sampling prop. to exp(lam d_k) with lam = eps_EM / (2D) is eps_EM-DP (bounded-range
form, ``app.mechanisms.sensitivity.em_epsilon``); that is Gumbel noise of scale
2D / eps_EM = 4 / eps_EM for D = 2. The notebook's Gumbel(2/eps_EM) is the D = 1
scale; with a swapped answer it would be 2 eps_EM-DP, so we do not use it there.

Privacy: exponential mechanism (pure eps_EM, its RDP by ICLInf Thm C.5) composed
with the Gaussian test (noise multiplier sigma), at delta - delta0; plus delta0,
the chance that an unstable top-k* set passes the test. Reported epsilon is the
smaller of the RDP conversion and basic composition (eps_EM + the Gaussian's exact
epsilon). ``params.additive_delta`` = delta0 is NOT in the RDP curve: a ledger that
composes curves must add it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np
from scipy.stats import norm

from app.mechanisms import aggregate as agg
from app.mechanisms import sensitivity as sens
from app.mechanisms.errors import MechanismParamError
from app.mechanisms.gen_common import (
    GenerationRequest,
    GenerationResult,
    Params,
    build_prompt,
    clean_answer,
    largest_feasible,
    model_seed,
    partition,
    require_delta,
    require_private,
    resolve_units,
    stop_strings,
)
from app.mechanisms.rng import resolve_rng
from app.privacy.accountant import ExponentialMechanismEvent, GaussianEvent, PrivacyCost, RdpAccountant
from app.privacy.gaussian import gaussian_epsilon, gaussian_sigma_analytic

if TYPE_CHECKING:
    from app.llm.types import Embedder, LanguageModel

NAME = "ksa"
PARAMS = (
    "partitions", "shots_per_partition", "max_keywords", "em_fraction", "ptr_delta_fraction",
    "member_temperature", "epsilon_em", "noise_multiplier",
)
DEFAULT_PARTITIONS = 10
DEFAULT_SHOTS = 4
DEFAULT_MAX_KEYWORDS = 30  # the notebook's bound on k
DEFAULT_EM_FRACTION = 0.2
DEFAULT_PTR_DELTA_FRACTION = 0.5

# The English stop-word list of NLTK (Bird et al. 2009), which the notebook removes.
STOP_WORDS = frozenset(
    """i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves he
    him his himself she she's her hers herself it it's its itself they them their theirs themselves what which
    who whom this that that'll these those am is are was were be been being have has had having do does did
    doing a an the and but if or because as until while of at by for with about against between into through
    during before after above below to from up down in out on off over under again further then once here
    there when where why how all any both each few more most other some such no nor not only own same so than
    too very s t can will just don don't should should've now d ll m o re ve y ain aren aren't couldn couldn't
    didn didn't doesn doesn't hadn hadn't hasn hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't
    needn needn't shan shan't shouldn shouldn't wasn wasn't weren weren't won won't wouldn wouldn't""".split()
)
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


# ---------------------------------------------------------------------------
# Pure parts
# ---------------------------------------------------------------------------


def keywords(text: str) -> set[str]:
    """The keywords of one answer: lower-cased word tokens, stop words and punctuation removed."""
    return {w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS}


def keyword_histogram(answers: Iterable[str]) -> Counter[str]:
    """How many answers use each keyword (each answer counts a keyword once)."""
    hist: Counter[str] = Counter()
    for a in answers:
        hist.update(keywords(a))
    return hist


def sorted_counts(hist: Counter[str], k_max: int) -> np.ndarray:
    """c_(1) >= ... >= c_(k_max + 1), zero-padded."""
    c = sorted(hist.values(), reverse=True)[: k_max + 1]
    return np.asarray(c + [0] * (k_max + 1 - len(c)), dtype=float)


def count_gaps(hist: Counter[str], k_max: int) -> np.ndarray:
    """d_k = c_(k) - c_(k+1) for k = 1..k_max (index k - 1)."""
    c = sorted_counts(hist, k_max)
    return c[:-1] - c[1:]


def top_keywords(hist: Counter[str], k: int) -> list[str]:
    """The k most used keywords, released in alphabetical order: the set is what PTR makes
    stable, not the ranking inside it."""
    ranked = sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    return sorted(w for w, _ in ranked)


def gap_sensitivity(change: sens.UnitChange) -> float:
    return 1.0 if change == sens.UnitChange.ADD_UNIT else 2.0


def select_k(gaps: np.ndarray, epsilon_em: float, gap_sens: float, rng: np.random.Generator,
             size: int | None = None) -> tuple[Any, np.ndarray]:
    """k* (1-based) by the exponential mechanism on the gaps, lam = eps_EM / (2D)
    (Gumbel-max: argmax d_k + Gumbel(2D / eps_EM)). ``size``: that many independent draws."""
    lam = epsilon_em / (2.0 * gap_sens)
    idx, noisy = agg.exponential_mechanism_sample(np.asarray(gaps, dtype=float), lam, rng, size)
    return (int(idx) + 1 if size is None else np.asarray(idx) + 1), noisy


@lru_cache(maxsize=64)
def _z(delta0: float) -> float:
    return float(norm.isf(delta0))  # Phi^-1(1 - delta0)


def ptr_test(gap: float, gap_sens: float, noise_multiplier: float, delta0: float,
             rng: np.random.Generator) -> tuple[bool, float]:
    """(passed, d^) with d^ = max(D, gap) + N(0, (D sigma)^2) - Phi^-1(1 - delta0) D sigma; passes iff d^ > D.
    An unstable set (gap <= D) passes with probability exactly delta0."""
    scale = gap_sens * noise_multiplier
    stat = max(gap_sens, float(gap)) + float(rng.normal(0.0, scale)) - _z(float(delta0)) * scale
    return stat > gap_sens, stat


def pass_probability(gap: float, gap_sens: float, noise_multiplier: float, delta0: float) -> float:
    """Exact P(test passes) for a given gap."""
    scale = gap_sens * noise_multiplier
    return float(norm.sf((gap_sens - max(gap_sens, gap)) / scale + norm.isf(delta0)))


# ---------------------------------------------------------------------------
# Accounting
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class KSABudget:
    epsilon_em: float
    noise_multiplier: float  # sigma of the PTR noise in units of the gap sensitivity
    delta0: float  # PTR failure probability
    delta_accounting: float  # delta - delta0, where the RDP/Gaussian composition is converted
    epsilon: float  # total guarantee at delta (<= the budget)
    method: str  # "rdp" or "basic"
    accountant: RdpAccountant


def _compose(epsilon_em: float, noise_multiplier: float, delta_acc: float, adjacency: str) -> tuple[float, str, RdpAccountant]:
    acc = RdpAccountant(adjacency=sens.parse_adjacency(adjacency))
    acc.compose(ExponentialMechanismEvent(epsilon_em))
    acc.compose(GaussianEvent(sigma=noise_multiplier, sensitivity=1.0))
    rdp_eps = acc.get_epsilon(delta_acc)
    basic = epsilon_em + gaussian_epsilon(noise_multiplier, delta_acc, 1.0)  # Dwork & Roth Thm 3.16
    return (rdp_eps, "rdp", acc) if rdp_eps <= basic else (basic, "basic", acc)


def calibrate_budget(epsilon: float, delta: float, adjacency: str, em_fraction: float,
                     ptr_delta_fraction: float) -> KSABudget:
    """Split (epsilon, delta): delta0 = f_delta delta; for a scale x, eps_EM = f x and the
    Gaussian sigma is the analytic one for ((1 - f) x, delta - delta0); x is the largest scale
    whose composition (RDP or basic, the smaller) is <= epsilon. Basic composition gives
    exactly x, so x >= epsilon."""
    delta0 = ptr_delta_fraction * delta
    d_acc = delta - delta0

    def parts(x: float) -> tuple[float, float]:
        return em_fraction * x, gaussian_sigma_analytic((1.0 - em_fraction) * x, d_acc, 1.0)

    def total(x: float) -> float:
        e, s = parts(x)
        return _compose(e, s, d_acc, adjacency)[0]

    x = largest_feasible(total, epsilon, epsilon * 0.999, epsilon * 20.0)
    e_em, sigma = parts(x)
    eps, method, acc = _compose(e_em, sigma, d_acc, adjacency)
    return KSABudget(e_em, sigma, delta0, d_acc, eps, method, acc)


def budget_for(epsilon_em: float, noise_multiplier: float, delta: float, adjacency: str,
               ptr_delta_fraction: float) -> KSABudget:
    delta0 = ptr_delta_fraction * delta
    d_acc = delta - delta0
    eps, method, acc = _compose(epsilon_em, noise_multiplier, d_acc, adjacency)
    return KSABudget(epsilon_em, noise_multiplier, delta0, d_acc, eps, method, acc)


# ---------------------------------------------------------------------------
# The mechanism
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class KSAConfig:
    partitions: int
    shots_per_partition: int
    max_keywords: int
    change: sens.UnitChange
    gap_sensitivity: float
    budget: KSABudget
    member_temperature: float

    def to_dict(self) -> dict[str, Any]:
        b = self.budget
        return {
            "partitions": self.partitions,
            "shots_per_partition": self.shots_per_partition,
            "max_keywords": self.max_keywords,
            "unit_change": self.change.value,
            "gap_sensitivity": self.gap_sensitivity,
            "epsilon_em": b.epsilon_em,
            "gumbel_scale": 2.0 * self.gap_sensitivity / b.epsilon_em,
            "noise_multiplier": b.noise_multiplier,
            "ptr_noise_std": self.gap_sensitivity * b.noise_multiplier,
            "additive_delta": b.delta0,
            "delta_accounting": b.delta_accounting,
            "member_temperature": self.member_temperature,
        }


def configure(req: GenerationRequest) -> KSAConfig:
    eps = require_private(req, NAME)
    delta = require_delta(req, NAME)
    p = Params(req.params, PARAMS)
    n = len(req.exemplars)
    t, k = resolve_units(n, p.count("partitions", None), p.count("shots_per_partition", None),
                         DEFAULT_PARTITIONS, DEFAULT_SHOTS, adjacency=req.adjacency)
    kmax = p.count("max_keywords", DEFAULT_MAX_KEYWORDS, maximum=200)
    f_delta = p.fraction("ptr_delta_fraction", DEFAULT_PTR_DELTA_FRACTION)
    # Always the swap-unit bound: the unit count comes from n (a default capped by n), so
    # whether an added exemplar adds a unit depends on the private n; the swap bound covers
    # both cases (an added unit moves the aggregate by no more than a swapped one).
    change = sens.unit_change(req.adjacency, exemplars_per_unit=k, uses_every_exemplar=False)
    if p.given("epsilon_em") or p.given("noise_multiplier"):
        if not (p.given("epsilon_em") and p.given("noise_multiplier")):
            missing = "noise_multiplier" if p.given("epsilon_em") else "epsilon_em"
            raise MechanismParamError("give both epsilon_em and noise_multiplier, or neither", param=f"params.{missing}")
        b = budget_for(
            p.given_positive("epsilon_em"), p.given_positive("noise_multiplier"), delta, req.adjacency, f_delta
        )
        if b.epsilon > eps * (1 + 1e-9):
            raise MechanismParamError(
                f"epsilon_em and noise_multiplier cost epsilon {b.epsilon:.4g} > the budget {eps:g}",
                param="params.epsilon_em",
            )
    else:
        b = calibrate_budget(eps, delta, req.adjacency, p.fraction("em_fraction", DEFAULT_EM_FRACTION), f_delta)
    return KSAConfig(t, k, kmax, change, gap_sensitivity(change), b, p.nonnegative("member_temperature", 0.0))


def privacy(cfg: KSAConfig, req: GenerationRequest) -> dict[str, Any]:
    b = cfg.budget
    acc = b.accountant
    # No RDP curve or rho in the cost: PTR's delta0 has no RDP form, and a ledger composing
    # curves would drop it. (epsilon, delta) then composes by basic composition.
    params = cfg.to_dict()
    params["rdp_without_ptr_delta"] = {"orders": list(acc.orders), "rdp": list(acc.rdp)}
    cost = PrivacyCost(
        epsilon=b.epsilon,
        delta=req.delta,
        adjacency=sens.parse_adjacency(req.adjacency).value,
        mechanism=NAME,
        params=params,
        alpha=acc.get_epsilon_and_order(b.delta_accounting)[1] if b.method == "rdp" else None,
        method=f"{b.method}+ptr",
    )
    d = cost.to_dict()
    d["is_private"] = True
    return d


def release_keywords(answers: Sequence[str], cfg: KSAConfig, rng: np.random.Generator) -> dict[str, Any]:
    """Steps 2-4 on the members' answers: the released keywords (None when the test fails)
    and the internals."""
    hist = keyword_histogram(answers)
    gaps = count_gaps(hist, cfg.max_keywords)
    k_star, noisy = select_k(gaps, cfg.budget.epsilon_em, cfg.gap_sensitivity, rng)
    gap = float(gaps[k_star - 1])
    passed, stat = ptr_test(gap, cfg.gap_sensitivity, cfg.budget.noise_multiplier, cfg.budget.delta0, rng)
    return {
        "keywords": top_keywords(hist, k_star) if passed else None,
        "k": k_star,
        "gaps": gaps,
        "gap": gap,
        "noisy_gap_scores": noisy,
        "ptr_statistic": stat,
        "ptr_passed": passed,
        "keyword_counts": sorted_counts(hist, cfg.max_keywords),
    }


def keyword_instruction(words: Sequence[str]) -> str:
    return "Use the following word suggestions: [" + ", ".join(words) + "]."


def run(
    req: GenerationRequest,
    lm: LanguageModel,
    embedder: Embedder | None = None,
    rng: np.random.Generator | None = None,
) -> GenerationResult:
    cfg = configure(req)
    g = resolve_rng(rng)
    units = partition(len(req.exemplars), cfg.partitions, cfg.shots_per_partition, g)
    prompts = [build_prompt(lm, req.template, [req.exemplars[i] for i in u], req.query) for u in units]
    stops = stop_strings(lm)
    members = lm.generate(prompts, max_new_tokens=req.max_tokens, temperature=cfg.member_temperature,
                          stop=stops, seed=model_seed(g))
    rel = release_keywords([clean_answer(m.text) for m in members], cfg, g)
    words = rel["keywords"]
    extra = keyword_instruction(words) if words else None
    final = build_prompt(lm, req.template, [], req.query, extra_instruction=extra)
    out = lm.generate([final], max_new_tokens=req.max_tokens, temperature=0.0, stop=stops)[0]
    internals = {"partitions": units, **rel, "fallback_zero_shot": words is None}
    return GenerationResult(clean_answer(out.text), NAME, privacy(cfg, req), internals, out.finish_reason,
                            len(out.token_ids))


def expected_threshold(cfg: KSAConfig, pass_prob: float = 0.5) -> float:
    """The gap at which the test passes with probability ``pass_prob`` (for docs and tuning)."""
    scale = cfg.gap_sensitivity * cfg.budget.noise_multiplier
    return cfg.gap_sensitivity + scale * (float(norm.isf(cfg.budget.delta0)) - float(norm.isf(pass_prob)))


__all__ = [
    "STOP_WORDS", "keywords", "keyword_histogram", "count_gaps", "top_keywords", "select_k", "ptr_test",
    "pass_probability", "calibrate_budget", "configure", "run",
]
