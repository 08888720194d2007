"""``esa``: embedding-space aggregation (Wu et al. 2024; tight-auditing paper Algorithm 3).

1. Split the exemplars into T disjoint partitions (random permutation,
   independent of the data); each partition + the query is one prompt; the model
   answers each prompt (greedy by default).
2. Embed every answer with the embedder (MiniLM, unit-norm), clip each embedding
   to L2 norm R (a no-op for unit-norm embeddings at R = 1, a guarantee for any
   other embedder), average: clean mean m = (1/T) sum_t clip_R(e_t).
3. Noisy mean m~ = m + N(0, sigma^2 I), sigma calibrated to the L2 sensitivity of
   the mean (Algorithm 3 lines 7-9; analytic Gaussian by default, classical on request).
4. Generate T_cand zero-shot candidates (no exemplars: public) and release the one
   whose embedding is nearest to m~ in L2 (Algorithm 3 lines 10-12). For unit-norm
   candidate embeddings this is also the one of highest cosine similarity
   (|e - m~|^2 = 1 - 2 e.m~ + |m~|^2), so the choice does not depend on the scale of m~.

Sensitivity (tight-auditing paper, Lemma A.1, generalised to a clip norm R): one
exemplar sits in one partition, so neighbouring sets change one clipped embedding,
    || m - m' || = (1/T) || v_t - v'_t || <= 2R/T
(replace-one; also add/remove whenever partitions hold several exemplars, since the
partition's answer changes arbitrarily). Only when every exemplar is its own
partition and all are used does add/remove add or drop a whole member
(``app.mechanisms.sensitivity.UnitChange.ADD_UNIT``): then T = n differs between
neighbours, and what is private is the noisy *sum* T m~ = sum_t clip_R(e_t) +
N(0, (T sigma)^2 I), whose sensitivity is R and whose noise T sigma (calibrated to
R/T on the mean scale) does not depend on T; the release depends on m~ only through
its direction (nearest unit-norm candidate = highest cosine), so it is a function of
the noisy sum.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from app.mechanisms import sensitivity as sens
from app.mechanisms._cost import cost_dict
from app.mechanisms.errors import MechanismParamError
from app.mechanisms.gen_common import (
    GenerationRequest,
    GenerationResult,
    Params,
    build_prompt,
    clean_answer,
    model_seed,
    partition,
    require_delta,
    require_private,
    resolve_units,
    stop_strings,
)
from app.mechanisms.rng import resolve_rng
from app.privacy.accountant import GaussianEvent
from app.privacy.calibration import calibrate_gaussian
from app.privacy.errors import PrivacyInputError

if TYPE_CHECKING:
    from app.llm.types import Embedder, LanguageModel

NAME = "esa"
PARAMS = (
    "partitions", "shots_per_partition", "candidates", "clip_norm", "noise_calibration",
    "member_temperature", "candidate_temperature", "candidate_top_p", "sigma",
)
DEFAULT_PARTITIONS = 8
DEFAULT_SHOTS = 4
DEFAULT_CANDIDATES = 20  # the notebook uses 100; 20 keeps CPU latency reasonable


# ---------------------------------------------------------------------------
# Pure parts (no model): used by the mechanism, the tests and white-box audits
# ---------------------------------------------------------------------------


def clip_rows(embeddings: np.ndarray, clip_norm: float) -> np.ndarray:
    """Scale every row to L2 norm <= clip_norm: v / max(1, |v| / R)."""
    e = np.asarray(embeddings, dtype=float)
    if e.ndim != 2:
        raise ValueError(f"embeddings must be (members, dim), got shape {e.shape}")
    norms = np.linalg.norm(e, axis=1, keepdims=True)
    return e / np.maximum(1.0, norms / float(clip_norm))


def mean_sensitivity(partitions: int, clip_norm: float, change: sens.UnitChange) -> float:
    """L2 sensitivity of the clean mean: 2R/T (Lemma A.1) or R/T (a member added/removed whole)."""
    factor = 1.0 if change == sens.UnitChange.ADD_UNIT else 2.0
    return factor * float(clip_norm) / float(partitions)


def aggregate(
    embeddings: np.ndarray, clip_norm: float, sigma: float, rng: np.random.Generator, size: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(clean mean of clipped embeddings, clean mean + N(0, sigma^2 I)) (Algorithm 3 lines 7-9).
    ``size``: that many independent noisy means at once, shape (size, dim) (audits, tests)."""
    clipped = clip_rows(embeddings, clip_norm)
    clean = clipped.mean(axis=0)
    shape = clean.shape if size is None else (int(size), clean.size)
    noisy = clean + rng.normal(0.0, float(sigma), size=shape)
    return clean, noisy


def select_candidate(noisy_mean: np.ndarray, candidate_embeddings: np.ndarray) -> tuple[int, np.ndarray]:
    """Index of the candidate nearest (L2) to the noisy mean, and all distances (Algorithm 3 line 11)."""
    c = np.asarray(candidate_embeddings, dtype=float)
    d = np.linalg.norm(c - np.asarray(noisy_mean, dtype=float)[None, :], axis=1)
    return int(np.argmin(d)), d


@dataclass(frozen=True)
class ESANoise:
    sigma: float
    sensitivity: float
    epsilon: float  # the guarantee the Gaussian step gives at delta (exact for the analytic sigma)
    method: str
    warnings: tuple[str, ...] = ()


@functools.lru_cache(maxsize=256)
def calibrate_noise(epsilon: float, delta: float, sensitivity: float, method: str) -> ESANoise:
    """sigma for (epsilon, delta) through ``app.privacy.calibrate_gaussian`` (analytic Gaussian of
    Balle & Wang 2018 by default; ``classical`` is Algorithm 3 line 8, proven for epsilon < 1).
    A pure function of its arguments with a frozen result: solved once per distinct (epsilon, delta,
    sensitivity, method), not on every answer (~2 ms of root finding, more than half of a simulated
    esa answer's time), as ``rnm._gaussian_calibration``; a calibration that fails raises every time
    (lru_cache keeps no exceptions)."""
    try:
        cal = calibrate_gaussian(epsilon, delta, sensitivity=sensitivity, method=method)
    except PrivacyInputError as exc:
        raise MechanismParamError(exc.message, param="epsilon" if exc.param == "target_epsilon" else exc.param) from None
    return ESANoise(cal.value, sensitivity, cal.epsilon, method, tuple(cal.warnings))


def noise_for_sigma(sigma: float, delta: float, sensitivity: float) -> ESANoise:
    """The exact (analytic) epsilon at delta of a caller-given sigma."""
    from app.privacy.gaussian import gaussian_epsilon

    return ESANoise(sigma, sensitivity, gaussian_epsilon(sigma, delta, sensitivity), "given-sigma")


# ---------------------------------------------------------------------------
# The mechanism
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ESAConfig:
    partitions: int
    shots_per_partition: int
    candidates: int
    clip_norm: float
    change: sens.UnitChange
    noise: ESANoise
    member_temperature: float
    candidate_temperature: float
    candidate_top_p: float = 0.9

    def to_dict(self) -> dict[str, Any]:
        return {
            "partitions": self.partitions,
            "shots_per_partition": self.shots_per_partition,
            "candidates": self.candidates,
            "clip_norm": self.clip_norm,
            "unit_change": self.change.value,
            "sigma": self.noise.sigma,
            "sensitivity": self.noise.sensitivity,
            "noise_calibration": self.noise.method,
            "member_temperature": self.member_temperature,
            "candidate_temperature": self.candidate_temperature,
            "candidate_top_p": self.candidate_top_p,
            "warnings": list(self.noise.warnings),
        }


def configure(req: GenerationRequest) -> ESAConfig:
    """Validate the parameters and calibrate sigma (before any model call)."""
    eps = require_private(req, NAME)
    delta = require_delta(req, NAME)
    p = Params(req.params, PARAMS)
    n = len(req.exemplars)
    t, k = resolve_units(n, p.count("partitions", None), p.count("shots_per_partition", None),
                         DEFAULT_PARTITIONS, DEFAULT_SHOTS, adjacency=req.adjacency)
    cands = p.count("candidates", DEFAULT_CANDIDATES, maximum=200)
    clip_norm = p.positive("clip_norm", 1.0)
    method = p.choice("noise_calibration", "analytic", ("analytic", "classical", "rdp"))
    # Always the swap-unit bound: the unit count comes from n (a default capped by n), so
    # whether an added exemplar adds a unit depends on the private n; the swap bound covers
    # both cases (an added unit moves the aggregate by no more than a swapped one).
    change = sens.unit_change(req.adjacency, exemplars_per_unit=k, uses_every_exemplar=False)
    s = mean_sensitivity(t, clip_norm, change)
    if p.given("sigma"):
        noise = noise_for_sigma(p.given_positive("sigma"), delta, s)
        if noise.epsilon > eps * (1 + 1e-9):
            raise MechanismParamError(
                f"sigma gives epsilon {noise.epsilon:.4g} > the budget {eps:g} at delta {delta:g}", param="params.sigma"
            )
    else:
        noise = calibrate_noise(eps, delta, s, method)
    return ESAConfig(
        t, k, cands, clip_norm, change, noise,
        p.nonnegative("member_temperature", 0.0), p.nonnegative("candidate_temperature", 1.0),
        p.positive("candidate_top_p", 0.9, upper=1.0),
    )


def privacy(cfg: ESAConfig, req: GenerationRequest) -> dict[str, Any]:
    return cost_dict(
        GaussianEvent(sigma=cfg.noise.sigma, sensitivity=cfg.noise.sensitivity),
        epsilon=cfg.noise.epsilon,
        delta=req.delta,
        adjacency=sens.parse_adjacency(req.adjacency),
        mechanism=NAME,
        params=cfg.to_dict(),
        method=f"gaussian-{cfg.noise.method}",
    )


def run(
    req: GenerationRequest, lm: LanguageModel, embedder: Embedder | None, rng: np.random.Generator | None = None
) -> GenerationResult:
    if embedder is None:
        raise MechanismParamError("esa needs an embedder model", param="embedder")
    cfg = configure(req)
    g = resolve_rng(rng)
    units = partition(len(req.exemplars), cfg.partitions, cfg.shots_per_partition, g)
    prompts = [build_prompt(lm, req.template, [req.exemplars[i] for i in u], req.query) for u in units]
    stops = stop_strings(lm)
    members = lm.generate(prompts, max_new_tokens=req.max_tokens, temperature=cfg.member_temperature,
                          stop=stops, seed=model_seed(g))
    member_emb = np.asarray(embedder.embed([clean_answer(m.text) for m in members]), dtype=float)
    clean, noisy = aggregate(member_emb, cfg.clip_norm, cfg.noise.sigma, g)

    zs = build_prompt(lm, req.template, [], req.query)
    cands = lm.generate([zs] * cfg.candidates, max_new_tokens=req.max_tokens, temperature=cfg.candidate_temperature,
                        top_p=cfg.candidate_top_p, stop=stops, seed=model_seed(g))
    cand_texts = [clean_answer(c.text) for c in cands]
    cand_emb = np.asarray(embedder.embed(cand_texts), dtype=float)
    idx, dist = select_candidate(noisy, cand_emb)
    internals = {
        "partitions": units,
        "clean_mean": clean,
        "noisy_mean": noisy,
        "sigma": cfg.noise.sigma,
        "sensitivity": cfg.noise.sensitivity,
        "candidate_distances": dist,
        "candidates": cand_texts,  # zero-shot: no exemplar went into them
        "selected": idx,
    }
    return GenerationResult(
        cand_texts[idx], NAME, privacy(cfg, req), internals, cands[idx].finish_reason, len(cands[idx].token_ids)
    )
