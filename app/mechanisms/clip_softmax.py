"""``clip_softmax``: private token generation of Amin et al. 2024 (ICLInf Appendix C, Algorithm 1).

s prompts, each one partition of the exemplars plus the query (one-shot when a
partition holds one exemplar). At every step, for each prompt's raw next-token
logits z,
    clip_c(z)_i = max(-c, z_i - max_j z_j + c)            (in [-c, c], top token at c)
the clipped vectors are averaged over the s prompts, and the next token is drawn
from softmax(mean / tau); the same token is appended to all s prompts. Decoding
is incremental (``app.llm`` decode session: one forward of s one-token
sequences per step, KV cache reused).

Privacy (ICLInf C.2-C.3, computed by ``app.privacy``): one exemplar sits in one
prompt, so a neighbour changes one prompt's clipped vector arbitrarily inside
[-c, c]^V and the mean by at most 2c/s per coordinate: the privacy module's
replace-one sensitivity Delta = 2c/(s tau) (``app.privacy.clip_softmax``). Per
token: zCDP rho = Delta^2/2 and the exponential-mechanism RDP of ICLInf Thm C.5 at
eps = 2 Delta (the smaller is used), composed over ``max_tokens`` steps (Thm C.7),
converted to (epsilon, delta) (Thm C.8 or Mironov, the smaller; pure basic
composition when smaller). We use this one-prompt-swapped sensitivity under
either adjacency: the prompt count s is a public parameter, and adding or
removing an exemplar changes one prompt, never zeroes it (ICLInf's c/(s tau) is the
zero-out model of Amin et al.). The temperature is calibrated to the budget with
``app.privacy.calibrate_clip_softmax`` (ICLInf Algorithm 3, feasible end kept)
unless given.

``public_top_k`` = k (default 20, 0 = whole vocabulary; Tang et al. 2024 restrict to
the top-100 tokens of a public zero-shot prompt): each step samples softmax(l(Z)/tau) restricted to C_t, the k most likely
next tokens of the zero-shot prompt (query + tokens released so far, no exemplar) plus
EOS. C_t is a function of public data and of earlier outputs only, so step t is the
same exponential mechanism run over the data-independent range C_t instead of the
vocabulary: every coordinate of l(Z)/tau still moves by <= 2c/(s tau) (the clip
bounds each prompt's vector in [-c, c] whatever the range), which is all that
Thm C.2/C.5 use (``app.privacy.clip_softmax`` takes no vocabulary size), and
adaptive composition (Thm C.7) covers a range chosen from earlier outputs. The cost
is therefore the same for every k (docs/generation.md, "Public candidate sets").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from scipy.special import logsumexp

from app.mechanisms import sensitivity as sens
from app.mechanisms import step_trace
from app.mechanisms.errors import MechanismParamError
from app.mechanisms.lse import logsumexp1d
from app.mechanisms.gen_common import (
    GenerationRequest,
    GenerationResult,
    Params,
    build_prompt,
    clean_answer,
    largest_feasible,
    partition,
    require_private,
    resolve_units,
    stop_strings,
)
from app.mechanisms.gen_decode import DecodeOutcome, decode, eos_ids, public_candidates, restrict
from app.mechanisms.rng import resolve_rng
from app.privacy.accountant import ClipSoftmaxEvent, RdpAccountant
from app.privacy.adjacency import Adjacency
from app.privacy.calibration import calibrate_clip_softmax
from app.privacy.errors import PrivacyInputError

if TYPE_CHECKING:
    from app.llm.types import Embedder, LanguageModel

NAME = "clip_softmax"
PARAMS = ("prompts", "shots_per_prompt", "clip", "temperature", "solve_for", "public_top_k")
DEFAULT_PROMPTS = 32
# Candidates per step from the public zero-shot distribution (0: whole vocabulary). 20 by
# measurement: ROUGE-L on the bundled task >= k = 100 and >> the vocabulary (0.000) at
# epsilon 1, 4 and 8 for clip_softmax and poe (docs/generation.md, "ROUGE-L").
DEFAULT_PUBLIC_TOP_K: int | None = 20
MAX_PUBLIC_TOP_K = 1 << 20
DEFAULT_SHOTS = 1
DEFAULT_CLIP = 2.0
# The sensitivity basis (see module doc): one prompt swapped.
ACCOUNTING_ADJACENCY = Adjacency.REPLACE_ONE


# ---------------------------------------------------------------------------
# Pure step (no model)
# ---------------------------------------------------------------------------


def clip_logits(logits: np.ndarray, clip: float) -> np.ndarray:
    """clip_c(z)_i = max(-c, z_i - max_j z_j + c), row-wise (ICLInf Algorithm 1)."""
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim == 1:
        z = z[None, :]
    return np.maximum(-clip, z - z.max(axis=1, keepdims=True) + clip)


def mean_clipped(logits: np.ndarray, clip: float) -> np.ndarray:
    """l(Z) = (1/s) sum_prompts clip_c(z)."""
    return clip_logits(logits, clip).mean(axis=0)


def step_scores(logits: np.ndarray, clip: float, temperature: float,
                candidates: np.ndarray | None = None) -> np.ndarray:
    """l(Z) / tau: the released token's law is softmax of these (-inf outside ``candidates``,
    a public candidate set, when given)."""
    return restrict(mean_clipped(logits, clip) / temperature, candidates)


def step_log_probs(logits: np.ndarray, clip: float, temperature: float,
                   candidates: np.ndarray | None = None) -> np.ndarray:
    """log softmax(l(Z) / tau) (over ``candidates`` when given): the exact law of the released token."""
    a = step_scores(logits, clip, temperature, candidates)
    return a - logsumexp(a)


def gumbel_argmax(scores: np.ndarray, rng: np.random.Generator, size: int | None = None) -> Any:
    """A draw from softmax(scores) by the Gumbel-max trick (``size`` independent draws at once)."""
    shape = scores.shape if size is None else (int(size), scores.size)
    idx = np.argmax(scores + rng.gumbel(size=shape), axis=-1)
    return int(idx) if size is None else idx


def sample_token(logits: np.ndarray, clip: float, temperature: float, rng: np.random.Generator,
                 size: int | None = None, candidates: np.ndarray | None = None) -> Any:
    """Draw from softmax(l(Z)/tau) (over ``candidates`` when given)."""
    return gumbel_argmax(step_scores(logits, clip, temperature, candidates), rng, size)


def public_top_k_param(p: Params, default: int | None) -> int | None:
    """``params.public_top_k``: an integer >= 1, or 0 for the whole vocabulary (absent: ``default``)."""
    k = p.count("public_top_k", default, minimum=0, maximum=MAX_PUBLIC_TOP_K)
    return k or None


def private_chooser(score_fn: Any, rng: np.random.Generator, public_top_k: int | None, eos: Any,
                    temperature: float | None = None) -> Any:
    """The per-step choice of a token-level mechanism: Gumbel-max over ``score_fn(private logits)``,
    restricted to the public top-k (+ EOS) when ``public_top_k`` is set. The candidate set is
    computed from the public row alone; the private rows never enter it. ``temperature``: the scale
    the scores are the clean statistic over (score_fn = statistic / temperature); given, each step
    goes to an in-process white-box audit's collector where one is set (``step_trace``: never into
    the internals)."""

    def choose(logits: np.ndarray, public_logits: np.ndarray | None = None) -> tuple[int, dict[str, Any]]:
        cand = None
        if public_top_k is not None:
            if public_logits is None:
                raise RuntimeError("public_top_k is set but no public row was decoded")
            cand = public_candidates(public_logits, public_top_k, sorted(eos))
        a = restrict(score_fn(logits), cand)
        tok = gumbel_argmax(a, rng)
        if temperature is not None:
            step_trace.record(a, temperature, tok)
        norm = logsumexp1d(a)
        info = {"token": tok, "log_prob": float(a[tok]) - norm, "max_prob": float(np.exp(np.max(a) - norm))}
        if cand is not None:
            info["candidates"] = int(cand.size)
        return tok, info

    return choose


def decode_units(req: GenerationRequest, lm: LanguageModel, units: Sequence[Sequence[int]], score_fn: Any,
                 rng: np.random.Generator, public_top_k: int | None, reencode: bool,
                 temperature: float | None = None) -> DecodeOutcome:
    """The decoding of clip_softmax and poe: one prompt per unit of exemplars, each step's token drawn by
    :func:`private_chooser` over ``score_fn`` of the prompts' logits, beside the public zero-shot row
    when ``public_top_k`` is set; ``temperature``: the sampling temperature an audit's step trace
    records (step_trace.py; None: no trace)."""
    prompts = [build_prompt(lm, req.template, [req.exemplars[i] for i in u], req.query) for u in units]
    choose = private_chooser(score_fn, rng, public_top_k, eos_ids(lm), temperature)
    public = build_prompt(lm, req.template, [], req.query) if public_top_k is not None else None
    return decode(lm, prompts, choose, req.max_tokens, stops=stop_strings(lm), reencode=reencode, public_prompt=public)


def public_internals(public_top_k: int | None) -> dict[str, Any]:
    """What the internals say about the candidate set."""
    if public_top_k is None:
        return {"public_top_k": None, "candidate_set": "vocabulary"}
    return {"public_top_k": public_top_k,
            "candidate_set": "public: zero-shot top-k (template + query + released tokens, no exemplar) + EOS"}


# ---------------------------------------------------------------------------
# Accounting
# ---------------------------------------------------------------------------


def accountant(clip: float, prompts: int, temperature: float, tokens: int) -> RdpAccountant:
    acc = RdpAccountant(adjacency=ACCOUNTING_ADJACENCY)
    return acc.compose(ClipSoftmaxEvent(clip=clip, batch_size=prompts, temperature=temperature, count=tokens))


def _pure_epsilon(acc: RdpAccountant) -> float:
    """The history's total pure epsilon: clip-softmax tokens are pure DP, so it is always defined."""
    eps = acc.pure_epsilon
    if eps is None:  # unreachable: every ClipSoftmaxEvent has a pure-DP bound
        raise RuntimeError("clip-softmax accounting has no pure-DP bound")
    return float(eps)


def epsilon_of(clip: float, prompts: int, temperature: float, tokens: int, delta: float) -> float:
    acc = accountant(clip, prompts, temperature, tokens)
    if delta <= 0.0:
        return _pure_epsilon(acc)
    return acc.get_epsilon(delta)


def calibrate_temperature(epsilon: float, delta: float, clip: float, prompts: int, tokens: int) -> float:
    """The smallest temperature whose total cost over ``tokens`` steps is <= epsilon."""
    try:
        if delta > 0.0:
            cal = calibrate_clip_softmax(
                "temperature", epsilon, delta, compositions=tokens, clip=clip, batch_size=prompts,
                adjacency=ACCOUNTING_ADJACENCY,
            )
            return float(cal.value)
    except PrivacyInputError as exc:
        raise MechanismParamError(exc.message, param="epsilon") from None
    # Pure DP (delta = 0): basic composition of the per-token exponential-mechanism epsilon.
    inv = largest_feasible(lambda x: epsilon_of(clip, prompts, 1.0 / x, tokens, 0.0), epsilon, 1e-12, 1e12)
    return 1.0 / inv


def calibrate_clip(epsilon: float, delta: float, temperature: float, prompts: int, tokens: int) -> float:
    """The largest clip whose total cost over ``tokens`` steps is <= epsilon."""
    try:
        if delta > 0.0:
            cal = calibrate_clip_softmax(
                "clip", epsilon, delta, compositions=tokens, temperature=temperature, batch_size=prompts,
                adjacency=ACCOUNTING_ADJACENCY,
            )
            return float(cal.value)
    except PrivacyInputError as exc:
        raise MechanismParamError(exc.message, param="epsilon") from None
    return largest_feasible(lambda c: epsilon_of(c, prompts, temperature, tokens, 0.0), epsilon, 1e-12, 1e12)


@dataclass(frozen=True)
class ClipSoftmaxConfig:
    prompts: int
    shots_per_prompt: int
    clip: float
    temperature: float
    tokens: int  # compositions charged (max_tokens)
    calibrated: bool
    public_top_k: int | None = None  # not in to_dict: the cost does not depend on it

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompts": self.prompts,
            "shots_per_prompt": self.shots_per_prompt,
            "clip": self.clip,
            "temperature": self.temperature,
            "compositions": self.tokens,
            "calibrated": self.calibrated,
            "sensitivity": 2.0 * self.clip / (self.prompts * self.temperature),
            "sensitivity_basis": "one prompt swapped (privacy module replace-one case)",
        }


def configure(req: GenerationRequest) -> ClipSoftmaxConfig:
    eps = require_private(req, NAME)
    p = Params(req.params, PARAMS)
    top_k = public_top_k_param(p, DEFAULT_PUBLIC_TOP_K)
    s, k = resolve_units(len(req.exemplars), p.count("prompts", None), p.count("shots_per_prompt", None),
                         DEFAULT_PROMPTS, DEFAULT_SHOTS, "prompts", "shots_per_prompt", adjacency=req.adjacency)
    solve_for = p.choice("solve_for", "temperature", ("temperature", "clip"))
    if solve_for == "clip":
        # Temperature given, clip calibrated (ICLInf E.2's clip variant of Algorithm 3).
        if not p.given("temperature"):
            raise MechanismParamError("solve_for clip needs a temperature", param="params.temperature")
        if p.given("clip"):
            raise MechanismParamError("clip is what solve_for clip calibrates: leave it out", param="params.clip")
        tau = p.given_positive("temperature")
        c = calibrate_clip(eps, req.delta, tau, s, req.max_tokens)
        return ClipSoftmaxConfig(s, k, c, tau, req.max_tokens, True, top_k)
    c = p.positive("clip", DEFAULT_CLIP)
    if p.given("temperature"):
        tau = p.given_positive("temperature")
        got = epsilon_of(c, s, tau, req.max_tokens, req.delta)
        if got > eps * (1 + 1e-9):
            raise MechanismParamError(
                f"temperature {tau:g} costs epsilon {got:.4g} over {req.max_tokens} tokens > the budget {eps:g}",
                param="params.temperature",
            )
        return ClipSoftmaxConfig(s, k, c, tau, req.max_tokens, False, top_k)
    tau = calibrate_temperature(eps, req.delta, c, s, req.max_tokens)
    return ClipSoftmaxConfig(s, k, c, tau, req.max_tokens, True, top_k)


def privacy(cfg: ClipSoftmaxConfig, req: GenerationRequest) -> dict[str, Any]:
    acc = accountant(cfg.clip, cfg.prompts, cfg.temperature, cfg.tokens)
    if req.delta > 0.0:
        cost = acc.privacy_cost(req.delta, NAME, cfg.to_dict())
        d = cost.to_dict()
    else:
        d = acc.privacy_cost(1e-10, NAME, cfg.to_dict()).to_dict()
        d.update(epsilon=_pure_epsilon(acc), delta=0.0, alpha=None, method="basic")
    # The sensitivity basis is the same under either adjacency (module doc); label the caller's.
    d["adjacency"] = sens.parse_adjacency(req.adjacency).value
    d["is_private"] = True
    return d


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
    units = partition(len(req.exemplars), cfg.prompts, cfg.shots_per_prompt, g)
    out = decode_units(req, lm, units, lambda z: step_scores(z, cfg.clip, cfg.temperature), g, cfg.public_top_k,
                       reencode, temperature=cfg.temperature)
    internals = {
        **public_internals(cfg.public_top_k),
        "partitions": units,
        "steps": out.steps,
        "prefill_seconds": out.prefill_seconds,
        "step_seconds": out.seconds_per_step,
    }
    return GenerationResult(clean_answer(out.text), NAME, privacy(cfg, req), internals, out.finish_reason,
                            len(out.token_ids))
