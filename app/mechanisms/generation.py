"""Registry of the generation mechanisms and the two non-private baselines.

    from app.mechanisms.generation import GenerationRequest, get_generation_mechanism
    req = GenerationRequest.build(exemplars, "Summarize: ...", epsilon=4.0, delta=1e-5, max_tokens=32,
                                  params={"partitions": 8})
    res = get_generation_mechanism("esa").run(req, lm, embedder, rng)
    res.text, res.privacy["epsilon"], res.internals["noisy_mean"]

Private: ``esa``, ``ksa``, ``clip_softmax``, ``poe``, ``mozo``. Baselines: ``zero_shot``
(no exemplar is read: epsilon 0) and ``full_context`` (every exemplar in one
prompt: no guarantee; never served over the private API).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from app.mechanisms import clip_softmax, esa, ksa, mozo, poe_decode
from app.mechanisms.errors import MechanismParamError, UnknownMechanismError
from app.mechanisms.gen_common import (
    GenerationRequest,
    GenerationResult,
    Params,
    build_prompt,
    clean_answer,
    model_seed,
    stop_strings,
)
from app.mechanisms.rng import resolve_rng

if TYPE_CHECKING:
    from app.llm.types import Embedder, LanguageModel

RunFn = Callable[
    [GenerationRequest, "LanguageModel", "Embedder | None", "np.random.Generator | None"], GenerationResult
]
"""``(request, model, embedder, rng) -> result``: one answer of a generation mechanism."""


@dataclass(frozen=True)
class GenerationMechanism:
    name: str
    is_private: bool
    needs_embedder: bool
    needs_decode_session: bool  # full-vocabulary logits step by step
    reads_exemplars: bool
    params: tuple[str, ...]
    run: RunFn
    configure: Callable[[GenerationRequest], Any] | None = None  # validates params / calibrates, no model call
    privacy: Callable[[Any, GenerationRequest], dict[str, Any]] | None = None  # (config, request) -> cost dict
    description: str = ""

    def cost(self, req: GenerationRequest) -> dict[str, Any]:
        """The privacy cost of one answer, known before any model call (validates the parameters;
        errors name the field): what a budget ledger prechecks."""
        if self.configure is None or self.privacy is None:
            Params(req.params, self.params)
            return _non_private(self.name, dict(req.params), 0.0 if not self.reads_exemplars else None)
        return self.privacy(self.configure(req), req)


# ---------------------------------------------------------------------------
# Baselines
# ---------------------------------------------------------------------------

BASELINE_PARAMS = ("temperature", "shots")


def _non_private(name: str, params: dict[str, Any], epsilon: float | None) -> dict[str, Any]:
    return {
        "epsilon": epsilon,
        "delta": 0.0,
        "adjacency": None,
        "mechanism": name,
        "params": params,
        "alpha": None,
        "method": None,
        "orders": None,
        "rdp": None,
        "rho": 0.0 if epsilon == 0.0 else None,
        "is_private": False,  # baselines: zero_shot reads no exemplar (epsilon 0), full_context has no guarantee
    }


def run_zero_shot(
    req: GenerationRequest,
    lm: LanguageModel,
    embedder: Embedder | None = None,
    rng: np.random.Generator | None = None,
) -> GenerationResult:
    p = Params(req.params, BASELINE_PARAMS)
    temp = p.nonnegative("temperature", 0.0)
    g = resolve_rng(rng)
    prompt = build_prompt(lm, req.template, [], req.query)
    out = lm.generate([prompt], max_new_tokens=req.max_tokens, temperature=temp, stop=stop_strings(lm),
                      seed=model_seed(g))[0]
    # No exemplar is read: 0-DP under either adjacency.
    return GenerationResult(clean_answer(out.text), "zero_shot", _non_private("zero_shot", {"temperature": temp}, 0.0),
                            {}, out.finish_reason, len(out.token_ids))


def _fitting_shots(lm: LanguageModel, req: GenerationRequest, perm: list[int]) -> int:
    try:
        limit = lm.capabilities().max_context
    except Exception:
        limit = None
    if not limit:
        return len(perm)

    def fits(k: int) -> bool:
        prompt = build_prompt(lm, req.template, [req.exemplars[i] for i in perm[:k]], req.query)
        return len(lm.tokenize(prompt)) + req.max_tokens <= limit

    lo, hi = 0, len(perm)
    if fits(hi):
        return hi
    while hi - lo > 1:  # fits(lo) and not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def run_full_context(
    req: GenerationRequest,
    lm: LanguageModel,
    embedder: Embedder | None = None,
    rng: np.random.Generator | None = None,
) -> GenerationResult:
    """All exemplars (or ``shots`` of them, chosen at random) in one prompt: no guarantee."""
    p = Params(req.params, BASELINE_PARAMS)
    temp = p.nonnegative("temperature", 0.0)
    g = resolve_rng(rng)
    n = len(req.exemplars)
    perm = [int(i) for i in g.permutation(n)]
    if p.given("shots"):
        k = p.count("shots", n, maximum=n)
    else:
        k = _fitting_shots(lm, req, perm)  # as many as fit the context window
    idx = sorted(perm[:k])
    prompt = build_prompt(lm, req.template, [req.exemplars[i] for i in idx], req.query)
    out = lm.generate([prompt], max_new_tokens=req.max_tokens, temperature=temp, stop=stop_strings(lm),
                      seed=model_seed(g))[0]
    return GenerationResult(clean_answer(out.text), "full_context",
                            _non_private("full_context", {"temperature": temp, "shots": k}, None),
                            {"shots": idx}, out.finish_reason, len(out.token_ids))


# ---------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------

GENERATION_MECHANISMS: dict[str, GenerationMechanism] = {
    m.name: m
    for m in (
        GenerationMechanism("esa", True, True, False, True, esa.PARAMS, esa.run, esa.configure, esa.privacy,
                            "embedding-space aggregation (Wu et al. 2024; Algorithm 3 of the tight-auditing paper)"),
        GenerationMechanism("ksa", True, False, False, True, ksa.PARAMS, ksa.run, ksa.configure, ksa.privacy,
                            "keyword-space aggregation with propose-test-release (Wu et al. 2024)"),
        GenerationMechanism("clip_softmax", True, False, True, True, clip_softmax.PARAMS, clip_softmax.run,
                            clip_softmax.configure, clip_softmax.privacy, "clipped-logit softmax decoding (Amin et al. 2024; ICLInf Alg. 1)"),
        GenerationMechanism("poe", True, False, True, True, poe_decode.PARAMS, poe_decode.run, poe_decode.configure,
                            poe_decode.privacy,
                            "Private PoEtry decoding: product of experts + exponential mechanism per token"),
        GenerationMechanism("mozo", True, False, True, True, mozo.PARAMS, mozo.run, mozo.configure, mozo.privacy,
                            "DPS-MOZO: product of one-shot outputs mixed with the zero-shot output, sampled "
                            "(Flemings et al. 2025; PMixED mixing)"),
        GenerationMechanism("zero_shot", False, False, False, False, BASELINE_PARAMS, run_zero_shot, None, None,
                            "no exemplars (epsilon 0)"),
        GenerationMechanism("full_context", False, False, False, True, BASELINE_PARAMS, run_full_context, None, None,
                            "every exemplar in one prompt (no privacy)"),
    )
}

_ALIASES = {
    "clip-softmax": "clip_softmax", "clipsoftmax": "clip_softmax", "poe-decode": "poe", "poe_decode": "poe",
    "poetry": "poe", "zero-shot": "zero_shot", "zeroshot": "zero_shot", "full-context": "full_context",
    "fullcontext": "full_context", "dps-mozo": "mozo", "dps_mozo": "mozo",
}


def get_generation_mechanism(name: str) -> GenerationMechanism:
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in GENERATION_MECHANISMS:
        raise UnknownMechanismError(
            f"unknown generation mechanism {name!r}; known: {', '.join(sorted(GENERATION_MECHANISMS))}",
            param="mechanism",
        )
    return GENERATION_MECHANISMS[key]


def generation_mechanism_names() -> list[str]:
    return sorted(GENERATION_MECHANISMS)


def generate(mechanism: str, req: GenerationRequest, lm: LanguageModel, embedder: Embedder | None = None,
             rng: np.random.Generator | None = None) -> GenerationResult:
    """One private answer: the single function a budget ledger wraps."""
    mech = get_generation_mechanism(mechanism)
    if mech.needs_embedder and embedder is None:
        raise MechanismParamError(f"{mech.name} needs an embedder model", param="embedder")
    return mech.run(req, lm, embedder, rng)


__all__ = [
    "GENERATION_MECHANISMS", "GenerationMechanism", "GenerationRequest", "GenerationResult", "generate",
    "generation_mechanism_names", "get_generation_mechanism",
]
