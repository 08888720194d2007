"""DP synthetic few-shot demonstrations (Tang et al., ICLR 2024, "Privacy-Preserving In-Context
Learning with Differentially Private Few-Shot Generation", Section 3 / Algorithm 1).

Pay once, answer for ever: from a private classification set, generate ``shots_per_label``
synthetic demonstrations per label under DP; they are then public (post-processing) and any
number of queries can use them as ICL demonstrations at no further privacy cost.

Per label y, per synthetic example, per token t (Algorithm 1):

* the label's private exemplars D_y are split by a fresh uniformly random permutation into
  ``partitions`` M disjoint subsets of ``shots_per_partition`` N exemplars (data independent;
  the unused tail is what makes the add/remove coupling of ``app.mechanisms.sensitivity`` work);
* subset j prompts the model for a new example of label y ("Here are texts with label y ...
  Text: x_1 ... Text:" + the tokens released so far) and gives its next-token distribution p_j;
* the public candidate set C_t is the top-K tokens (+ EOS) of the same prompt with NO private
  exemplar (Tang et al. Section 3.2 "reducing the vocabulary with public tokens"; here exactly
  ``gen_decode.public_candidates`` that ``public_top_k`` uses for clip_softmax / poe);
* the histogram s = sum_j softmax(z_j restricted to C_t) (each term a probability vector on C_t)
  gets Gaussian noise N(0, sigma^2 I) and the released token is argmax_c (s_c + noise_c)
  (Algorithm 1, the noisy-argmax step; releasing only the argmax is post-processing of the
  Gaussian mechanism).

Privacy (Gaussian mechanism, Tang et al. Section 3.1 and Thm 1; Mironov 2017 Prop. 7):
one exemplar sits in one subset, so a neighbour changes one p_j, a probability vector on C_t,
to another: ||s - s'||_2 <= ||p - p'||_2 <= sqrt 2 (the SWAP_UNIT case of
``app.mechanisms.sensitivity``: subsets hold a subset of the exemplars). C_t is a function of
public data and earlier outputs, so adaptive composition covers it. Per token: RDP
alpha * 2 / (2 sigma^2). Each label's generation reads only that label's exemplars (parallel
composition): under add/remove a neighbour touches ONE label's stream, under replace-one (the
replaced exemplar may change label) at most TWO. The charged composition count is therefore
min(L, 1 or 2) x shots_per_label x max_tokens Gaussian releases (max_tokens whatever the stop:
stopping early is post-processing of the released tokens). The (epsilon, delta) is the exact GDP
composition (Dong, Roth & Su 2022 Cor. 3.3 / Balle & Wang 2018: mu = sqrt(k) sqrt 2 / sigma);
the RDP curve goes to the ledger. sigma is calibrated to the budget with
``app.privacy.calibrate_gaussian`` (analytic; the achieved epsilon is <= the target).

Assumed public (as everywhere in dpicl): the label set and the per-label exemplar counts
(``label_counts`` is in the dataset resource), which fix the partition sizes.
Not claimed: amplification by subsampling (the unused tail is not accounted for).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np
from scipy.special import logsumexp

from app.mechanisms._cost import cost_dict
from app.mechanisms.errors import MechanismParamError
from app.mechanisms.gen_common import check_count, check_positive, parse_adjacency, partition
from app.mechanisms.gen_decode import decode, eos_ids, public_candidates
from app.mechanisms.rng import resolve_rng
from app.mechanisms.synth_filter import REASONS, FilterResult, filter_demonstrations
from app.privacy.accountant import GaussianEvent
from app.privacy.adjacency import Adjacency
from app.privacy.calibration import calibrate_gaussian
from app.privacy.errors import PrivacyInputError

if TYPE_CHECKING:
    from app.llm.types import LanguageModel

NAME = "dp_few_shot_generation"
SENSITIVITY = math.sqrt(2.0)  # L2 change of a sum of probability vectors when one vector changes
# Signal grows with the partitions (the histogram sums M distributions), the noise does not:
# on the bundled task M = 64 at epsilon 8 gives texts close to the noiseless ones, M = 16 noise.
DEFAULT_PARTITIONS = 64
DEFAULT_SHOTS_PER_PARTITION = 1
DEFAULT_PUBLIC_TOP_K = 20
MAX_PUBLIC_TOP_K = 1 << 20
MAX_TOKENS_LIMIT = 256
SHOTS_LIMIT = 64


# ---------------------------------------------------------------------------
# The per-token step (pure arithmetic: the sampled privacy test drives these)
# ---------------------------------------------------------------------------


def aggregate(private_logits: np.ndarray, candidates: np.ndarray | None = None) -> np.ndarray:
    """s = sum_j softmax(z_j restricted to C): the vote histogram of Algorithm 1 over the candidate
    set (the whole vocabulary when ``candidates`` is None). Each row contributes a probability
    vector, so one changed row moves s by at most sqrt 2 in L2."""
    z = np.asarray(private_logits, dtype=np.float64)
    if z.ndim == 1:
        z = z[None, :]
    if candidates is not None:
        z = z[:, np.asarray(candidates, dtype=np.int64)]
    p = np.exp(z - logsumexp(z, axis=1, keepdims=True))
    return p.sum(axis=0)


def release(sums: np.ndarray, sigma: float, rng: np.random.Generator, size: int | None = None) -> Any:
    """argmax_c (s_c + N(0, sigma^2)): the index (into ``sums``) of the released token; ``size``
    independent draws at once (tests)."""
    s = np.asarray(sums, dtype=np.float64)
    if not (sigma > 0 and math.isfinite(sigma)):
        raise MechanismParamError(f"sigma must be a finite number > 0, got {sigma!r}", param="sigma")
    if size is None:
        return int(np.argmax(s + rng.normal(0.0, sigma, size=s.shape)))
    return np.argmax(s[None, :] + rng.normal(0.0, sigma, size=(int(size), s.size)), axis=1)


# ---------------------------------------------------------------------------
# Parameters, calibration, cost
# ---------------------------------------------------------------------------


def streams_charged(adjacency: Adjacency | str, labels: int) -> int:
    """Label streams one neighbour can touch (module doc): 1 under add/remove, 2 under replace-one
    (an exemplar whose label changes leaves one stream and joins another), never more than L."""
    adj = parse_adjacency(adjacency)
    return min(int(labels), 1 if adj == Adjacency.ADD_REMOVE else 2)


@dataclass(frozen=True)
class SynthesisConfig:
    epsilon: float
    delta: float
    adjacency: str
    labels: tuple[str, ...]
    shots_per_label: int
    max_tokens: int
    partitions: int
    shots_per_partition: int
    public_top_k: int | None
    sigma: float
    compositions: int  # Gaussian releases charged: streams x shots x max_tokens
    streams: int
    calibrated: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "shots_per_label": self.shots_per_label,
            "max_tokens": self.max_tokens,
            "partitions": self.partitions,
            "shots_per_partition": self.shots_per_partition,
            "public_top_k": self.public_top_k,
            "sigma": self.sigma,
            "sensitivity": SENSITIVITY,
            "compositions": self.compositions,
            "streams_charged": self.streams,
            "labels": len(self.labels),
            "calibrated": self.calibrated,
            "aggregation": "sum of per-partition next-token distributions on the public candidate set, "
                           "Gaussian noise, argmax (Tang et al. 2024 Alg. 1)",
        }


def plan(
    *,
    epsilon: Any,
    delta: Any,
    labels: Sequence[str],
    label_counts: Mapping[str, int],
    shots_per_label: Any,
    max_tokens: Any = 24,
    partitions: Any = None,
    shots_per_partition: Any = None,
    public_top_k: Any = DEFAULT_PUBLIC_TOP_K,
    adjacency: Any = "replace-one",
    sigma: Any = None,
) -> SynthesisConfig:
    """Validate the parameters (errors name the field) and calibrate sigma to (epsilon, delta) over
    the whole synthesis. No model call. ``sigma`` given: checked against the budget instead."""
    eps = check_positive(epsilon, "epsilon")
    try:
        d = float(delta)
    except (TypeError, ValueError):
        raise MechanismParamError(f"must be a number, got {delta!r}", param="delta") from None
    if not (0.0 < d < 1.0):
        raise MechanismParamError(f"the Gaussian mechanism needs delta in (0, 1), got {delta!r}", param="delta")
    adj = parse_adjacency(adjacency)
    labs = tuple(str(x) for x in labels)
    if len(labs) < 1 or len(set(labs)) != len(labs):
        raise MechanismParamError("labels must be distinct and non-empty", param="labels")
    shots = check_count(shots_per_label, "shots_per_label", maximum=SHOTS_LIMIT)
    T = check_count(max_tokens, "max_tokens", maximum=MAX_TOKENS_LIMIT)
    n_min = min(int(label_counts.get(y, 0)) for y in labs)
    N = check_count(shots_per_partition if shots_per_partition is not None else DEFAULT_SHOTS_PER_PARTITION,
                    "shots_per_partition", maximum=1000)
    if partitions is None:
        M = min(DEFAULT_PARTITIONS, n_min // N)
        if M < 1:
            raise MechanismParamError(
                f"every label needs at least shots_per_partition = {N} exemplars; the smallest label has {n_min}",
                param="shots_per_partition")
    else:
        M = check_count(partitions, "partitions", maximum=10_000)
    if M * N > n_min:
        raise MechanismParamError(
            f"partitions x shots_per_partition = {M} x {N} = {M * N} exemplars per label are needed; "
            f"the smallest label has {n_min}", param="partitions")
    k = check_count(public_top_k, "public_top_k", minimum=0, maximum=MAX_PUBLIC_TOP_K) if public_top_k is not None else 0
    streams = streams_charged(adj, len(labs))
    comps = streams * shots * T
    if sigma is None:
        try:
            cal = calibrate_gaussian(eps, d, sensitivity=SENSITIVITY, compositions=comps, method="analytic")
        except PrivacyInputError as exc:
            raise MechanismParamError(exc.message, param="epsilon") from None
        sig, calibrated = float(cal.value), True
    else:
        sig = check_positive(sigma, "sigma")
        got = epsilon_of(sig, d, comps)
        if got > eps * (1 + 1e-9):
            raise MechanismParamError(f"sigma {sig:g} costs epsilon {got:.4g} > the budget {eps:g}", param="sigma")
        calibrated = False
    return SynthesisConfig(eps, d, adj.value, labs, shots, T, M, N, k or None, sig, comps, streams, calibrated)


def epsilon_of(sigma: float, delta: float, compositions: int) -> float:
    """Exact epsilon(delta) of ``compositions`` Gaussian releases at L2 sensitivity sqrt 2 (GDP)."""
    from app.privacy.gaussian import gaussian_epsilon

    return float(gaussian_epsilon(sigma, delta, SENSITIVITY, compositions))


def cost(cfg: SynthesisConfig) -> dict[str, Any]:
    """The whole synthesis's privacy cost (``PrivacyCost.to_dict()`` + ``is_private``): exact GDP
    (epsilon, delta) and the RDP curve of ``compositions`` Gaussian releases for the ledger.
    A worst-case bound (data independent), known before any model call."""
    eps = min(epsilon_of(cfg.sigma, cfg.delta, cfg.compositions), cfg.epsilon) if cfg.calibrated else \
        epsilon_of(cfg.sigma, cfg.delta, cfg.compositions)
    return cost_dict(GaussianEvent(cfg.sigma, SENSITIVITY, cfg.compositions), epsilon=eps, delta=cfg.delta,
                     adjacency=Adjacency.parse(cfg.adjacency), mechanism=NAME, params=cfg.to_dict(),
                     method="gdp-exact")


# ---------------------------------------------------------------------------
# Prompts
# ---------------------------------------------------------------------------


def synthesis_prompt(label: str, shots: Sequence[str], input_prefix: str = "Text:") -> str:
    """Tang et al.'s generation prompt (App. A style): the label, the subset's texts, an open slot.
    With no shot it is the public zero-shot prompt that picks the candidate set."""
    p = (input_prefix or "Text:").strip()
    head = f"Here are examples of texts with the label \"{label}\".\n\n"
    return head + "".join(f"{p} {' '.join(x.split())}\n\n" for x in shots) + p


# ---------------------------------------------------------------------------
# The generator
# ---------------------------------------------------------------------------


@dataclass
class SynthesisResult:
    examples: list[tuple[str, str]]  # (synthetic text, label): degenerate ones dropped (synth_filter)
    privacy: dict[str, Any]
    config: SynthesisConfig
    internals: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    forward_passes: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> count (synth_filter.REASONS)
    kept_per_label: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"examples": [{"input": a, "output": b} for a, b in self.examples], "privacy": self.privacy,
                "params": self.config.to_dict(), "internals": self.internals, "seconds": self.seconds,
                "forward_passes": self.forward_passes}


def synthesize(
    lm: LanguageModel,
    exemplars: Sequence[tuple[str, str]],
    cfg: SynthesisConfig,
    *,
    input_prefix: str = "Text:",
    rng: np.random.Generator | None = None,
    on_example: Callable[[int, int], None] | None = None,
    on_step: Callable[[], None] | None = None,
    filter_degenerate: bool = True,
) -> SynthesisResult:
    """Run Algorithm 1 for every label of ``cfg``. ``on_example(done, total)`` after each synthetic
    example and ``on_step()`` before each token (progress and cancel points: they may raise).
    Exemplar text never enters the result; internals hold exemplar indices and numbers.
    ``filter_degenerate`` (default) drops empty, too short, non-word, truncated and duplicate texts
    (``app.mechanisms.synth_filter``): post-processing of the released tokens, no change to the cost;
    False keeps every non-empty text (the benchmark's unfiltered comparison)."""
    g = resolve_rng(rng)
    t0 = time.perf_counter()
    by_label: dict[str, list[int]] = {y: [] for y in cfg.labels}
    for i, (_, y) in enumerate(exemplars):
        if y in by_label:
            by_label[y].append(i)
    for y, idx in by_label.items():
        if len(idx) < cfg.partitions * cfg.shots_per_partition:
            raise MechanismParamError(
                f"a label has {len(idx)} exemplars, fewer than partitions x shots_per_partition", param="partitions")
    eos = sorted(eos_ids(lm))
    total = len(cfg.labels) * cfg.shots_per_label
    out: list[tuple[str, str]] = []
    records: list[dict[str, Any]] = []
    passes = 0
    for y in cfg.labels:
        idx = by_label[y]
        public = synthesis_prompt(y, [], input_prefix)
        for _ in range(cfg.shots_per_label):
            units = partition(len(idx), cfg.partitions, cfg.shots_per_partition, g)
            units = [[idx[i] for i in u] for u in units]  # dataset indices
            prompts = [synthesis_prompt(y, [exemplars[i][0] for i in u], input_prefix) for u in units]

            def choose(logits: np.ndarray, public_logits: np.ndarray | None = None) -> tuple[int, dict[str, Any]]:
                if on_step is not None:
                    on_step()
                cand = None
                if cfg.public_top_k is not None:
                    if public_logits is None:  # unreachable: decode passes the public row when public_prompt is set
                        raise RuntimeError("public_top_k needs the public prompt's logits")
                    cand = public_candidates(public_logits, cfg.public_top_k, eos)
                s = aggregate(logits, cand)
                j = release(s, cfg.sigma, g)
                tok = int(cand[j]) if cand is not None else j
                return tok, {"token": tok, "candidates": int(s.size)}

            res = decode(lm, prompts, choose, cfg.max_tokens, stops=["\n"],
                         public_prompt=public if cfg.public_top_k is not None else None)
            passes += (2 if cfg.public_top_k is not None else 1) * max(1, len(res.steps))
            out.append((" ".join(res.text.split()), y))
            records.append({"label": y, "partitions": units, "tokens": len(res.token_ids),
                            "token_ids": [int(t) for t in res.token_ids],
                            "finish_reason": res.finish_reason})
            if on_example is not None:
                on_example(len(records), total)
    # Post-processing of the released texts only (no exemplar is read): the charge above is unchanged.
    if filter_degenerate:
        filt = filter_demonstrations(out, cfg.labels)
    else:  # every non-empty text, as before the filter (the benchmark's unfiltered comparison)
        kept = [e for e in out if e[0]]
        filt = FilterResult(kept, {r: sum(1 for e in out if not e[0]) if r == "empty" else 0 for r in REASONS},
                            {y: sum(1 for _, b in kept if b == y) for y in cfg.labels},
                            [None if e[0] else "empty" for e in out])
    for rec, why in zip(records, filt.reasons):
        rec["kept"], rec["dropped"] = why is None, why
    internals = {"examples": records, "candidate_set": (
        "vocabulary" if cfg.public_top_k is None else
        "public: zero-shot top-k of the label's prompt without exemplars (+ EOS)")}
    return SynthesisResult(filt.kept, cost(cfg), cfg, internals, time.perf_counter() - t0, passes, filt.dropped,
                           filt.kept_per_label)


__all__ = ["NAME", "SynthesisConfig", "SynthesisResult", "aggregate", "cost", "plan", "release",
           "streams_charged", "synthesis_prompt", "synthesize"]
