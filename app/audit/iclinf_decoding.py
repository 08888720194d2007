"""The ICLInf privacy audit of clipped-logit private decoding (ICLInf Section 5, Appendix C).

The audited mechanism is ``app.mechanisms.clip_softmax`` (Amin et al. 2024; ICLInf
Algorithm 1): s one-shot prompts, per step each prompt's logits clipped to
clip_c(z)_i = max(-c, z_i - max_j z_j + c), averaged, token ~ softmax(mean / tau).
The decoding loop is ``app.mechanisms.gen_decode.decode`` (KV cache); at every
step we also compute, from the same (s, V) logits, the output distribution of
each neighbouring batch and

    eps_t(alpha*) = max_p D^<->_alpha*(A_t(D) || A_t(D \\ {p}))         (Thm C.6, Eq. 7, both directions)
    eps_RDP       = sum over tokens and sequences of eps_t            (Thm C.7; C.3.3)
    eps_empirical = eps_RDP + log((a-1)/a) - (log delta + log a)/(a-1)   at a = alpha*   (Thm C.8)

where alpha* is the order of the calibration (ICLInf Algorithm 3: the
temperature solved for the target with c and s fixed, integer orders 2..99,
BBGHS conversion). The theoretical side is the composed clip-softmax RDP of
``app.privacy`` (C.3.1) over N_gen x T_max tokens, converted at the same alpha*.

Adjacency (docs/privacy.md, "a finding"; see docs/iclinf.md). ICLInf C.3.3
doubles its remove-one empirical epsilon (Thm C.9) to compare with a theoretical
loss it calls bounded; but its rho = (c/(s tau))^2/2 is the add/remove bound of
a *zero-out* neighbour (prompt p contributes nothing, divisor s fixed), and
under replace-one the bound is 4 rho. Thm C.9 is a pure-DP statement, not a
rule for RDP-derived (eps, delta). We compare like with like instead:

* ``neighbour="zero-out"`` (default): A(D \\ {p}) averages with p's clipped
  logits set to 0 and the divisor s kept; theory under add-remove (ICLInf's
  rho, ICLInf's numbers). The per-token mean moves by z_p/(s tau) in [-c/(s tau),
  c/(s tau)]: every pair is inside the bound, so eps_empirical <= eps_theoretical.
* ``neighbour="remove"``: p removed and the mean taken over s - 1 prompts; the mean
  moves by (mean_{-p} - z_p)/(s tau), as if p were replaced by a prompt whose
  clipped logits are mean_{-p} in [-c, c]^V: a replace-one neighbour, so theory
  under replace-one (4 rho). Again eps_empirical <= eps_theoretical.

``epsilon_empirical_x2`` (2 x eps_empirical, Thm C.9 as printed) is reported for
comparison with the paper's Figure 6; it is not used for verdicts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from scipy.special import logsumexp

from app.audit.iclinf_renyi import renyi_divergence
from app.mechanisms.clip_softmax import clip_logits, sample_token
from app.mechanisms.gen_decode import decode
from app.privacy.adjacency import Adjacency
from app.privacy.calibration import calibrate_clip_softmax
from app.privacy.clip_softmax import clip_softmax_rdp
from app.privacy.rdp import ICLINF_ORDERS, convert_rdp, parse_orders

__all__ = [
    "GENERATION_TEMPLATES",
    "NEIGHBOURS",
    "DecodingAudit",
    "GenerationTemplate",
    "StepLoss",
    "audit_decoding",
    "audit_grid",
    "empirical_epsilon",
    "generation_batches",
    "most_frequent_label",
    "step_distributions",
    "step_loss",
    "theoretical",
    "theory_adjacency",
]

Neighbour = Literal["zero-out", "remove"]
NEIGHBOURS: tuple[str, ...] = ("zero-out", "remove")
ProgressFn = Callable[[float, str], None]


def theory_adjacency(neighbour: str) -> Adjacency:
    """The adjacency whose clip-softmax bound covers every neighbour of this kind (module doc)."""
    if neighbour == "zero-out":
        return Adjacency.ADD_REMOVE
    if neighbour == "remove":
        return Adjacency.REPLACE_ONE
    raise ValueError(f"neighbour must be one of {NEIGHBOURS}, got {neighbour!r}")


# ---------------------------------------------------------------------------
# One step (no model)
# ---------------------------------------------------------------------------


def step_distributions(logits: np.ndarray, clip: float, temperature: float,
                       neighbour: Neighbour = "zero-out") -> tuple[np.ndarray, np.ndarray]:
    """(log P (V,), log Q (s, V)): the law of the released token with the full batch (Algorithm 1) and
    with each prompt p removed (row p)."""
    z = clip_logits(np.asarray(logits), clip)  # (s, V) float64
    s = z.shape[0]
    total = z.sum(axis=0)
    a = total / (s * temperature)
    log_p = a - logsumexp(a)
    rest = total[None, :] - z
    if neighbour == "zero-out":
        b = rest / (s * temperature)
    elif neighbour == "remove":
        if s < 2:
            raise ValueError("the remove neighbour needs at least two prompts")
        b = rest / ((s - 1) * temperature)
    else:
        raise ValueError(f"neighbour must be one of {NEIGHBOURS}, got {neighbour!r}")
    log_q = b - logsumexp(b, axis=1, keepdims=True)
    return log_p, log_q


@dataclass(frozen=True)
class StepLoss:
    """Thm C.6 at one token: max over p of D^<-> (``loss``), the prompt that attains it, and the two
    directions at that prompt."""

    loss: float
    prompt: int
    forward: float  # D_alpha(A(D) || A(D \ p))
    backward: float  # D_alpha(A(D \ p) || A(D))


def step_loss(logits: np.ndarray, clip: float, temperature: float, alpha: float,
              neighbour: Neighbour = "zero-out") -> StepLoss:
    log_p, log_q = step_distributions(logits, clip, temperature, neighbour)
    fwd = renyi_divergence(log_p[None, :], log_q, alpha)
    bwd = renyi_divergence(log_q, log_p[None, :], alpha)
    both = np.maximum(fwd, bwd)
    i = int(np.argmax(both))
    return StepLoss(float(both[i]), i, float(fwd[i]), float(bwd[i]))


# ---------------------------------------------------------------------------
# Theory and conversion
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Theory:
    temperature: float
    alpha: float
    epsilon: float  # BBGHS at alpha (ICLInf Algorithm 2 minimum)
    rdp_at_alpha: float  # composed theoretical RDP at alpha
    compositions: int
    adjacency: str
    calibrated: bool


def theoretical(
    *,
    clip: float,
    batch_size: int,
    compositions: int,
    delta: float,
    neighbour: Neighbour = "zero-out",
    target_epsilon: float | None = None,
    temperature: float | None = None,
    orders: Any = ICLINF_ORDERS,
) -> Theory:
    """ICLInf C.3.1-C.3.2: tau by Algorithm 3 for ``target_epsilon`` (feasible end, app.privacy), or the
    epsilon of a given tau; alpha* the minimising order of Algorithm 2 (BBGHS, as the paper)."""
    adj = theory_adjacency(neighbour)
    grid = parse_orders(orders)
    if (target_epsilon is None) == (temperature is None):
        raise ValueError("give exactly one of target_epsilon and temperature")
    calibrated = temperature is None
    if temperature is None:
        assert target_epsilon is not None  # exactly one of the two, checked above
        cal = calibrate_clip_softmax("temperature", target_epsilon, delta, compositions=compositions, clip=clip,
                                     batch_size=batch_size, orders=grid, adjacency=adj, conversion="bbghs")
        temperature = float(cal.value)
    rdp = clip_softmax_rdp(grid, clip, batch_size, temperature, compositions, adj)
    conv = convert_rdp(grid, rdp, delta, "bbghs")
    alpha = conv.alpha
    i = int(np.flatnonzero(grid == alpha)[0])
    return Theory(float(temperature), float(alpha), float(conv.epsilon), float(rdp[i]), int(compositions),
                  adj.value, calibrated)


def empirical_epsilon(rdp: float, alpha: float, delta: float) -> float:
    """Thm C.8 (BBGHS) at the single order alpha*; the same conversion as the theory (monotone in rdp)."""
    return float(convert_rdp(np.array([float(alpha)]), np.array([float(rdp)]), delta, "bbghs").epsilon)


# ---------------------------------------------------------------------------
# Prompts (ICLInf Table 3)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class GenerationTemplate:
    """One-shot generation prompt (ICLInf Appendix D.2, Table 3): instruction, one labelled example,
    then the same label and an open text field."""

    instruction: str
    label_prefix: str
    text_prefix: str
    name: str = "custom"

    def render(self, text: str, label: str) -> str:
        return (f"{self.instruction}\n\n{self.label_prefix}{label}\n{self.text_prefix}{text}\n\n"
                f"{self.label_prefix}{label}\n{self.text_prefix.rstrip()}")


GENERATION_TEMPLATES: dict[str, GenerationTemplate] = {
    t.name: t for t in (
        # ICLInf Table 3, verbatim wording.
        GenerationTemplate("Given a label of news type, generate the chosen type of news accordingly.",
                           "News Type: ", "Text: ", "iclinf-agnews"),
        # Our wording in the same style for any labelled set (the bundled task, registered sets).
        GenerationTemplate("Given a label, write a text with that label.", "Label: ", "Text: ", "generic"),
    )
}


def most_frequent_label(exemplars: Sequence[tuple[str, str]]) -> str:
    """The output shared by most exemplars (ties: the smallest string), ICLInf D.2's default label."""
    if not exemplars:
        raise ValueError("need at least one exemplar")
    labs, cnt = np.unique([lab for _, lab in exemplars], return_counts=True)
    return str(labs[int(np.argmax(cnt))])


def generation_batches(
    exemplars: Sequence[tuple[str, str]],
    *,
    batch_size: int,
    sequences: int,
    label: str | None,
    template: GenerationTemplate,
    rng: np.random.Generator,
) -> tuple[list[list[str]], list[list[int]], str]:
    """For each sequence, s one-shot prompts from s distinct exemplars of ``label`` (ICLInf D.2 fixes one
    label; default: the most frequent). Returns (prompts per sequence, exemplar indices, label).

    The error names counts, never the label: for a generation set the "label" is a private output."""
    if label is None:
        label = most_frequent_label(exemplars)
    pool = [i for i, (_, lab) in enumerate(exemplars) if lab == label]
    if len(pool) < batch_size:
        raise ValueError(f"the label has {len(pool)} exemplars, fewer than the batch size s = {batch_size}")
    prompts, indices = [], []
    for _ in range(sequences):
        idx = [pool[int(i)] for i in rng.choice(len(pool), size=batch_size, replace=False)]
        indices.append(idx)
        prompts.append([template.render(exemplars[i][0], label) for i in idx])
    return prompts, indices, label


# ---------------------------------------------------------------------------
# The audit
# ---------------------------------------------------------------------------


@dataclass
class DecodingAudit:
    """One (target, delta) cell of Figure 6."""

    target_epsilon: float | None
    delta: float
    clip: float
    batch_size: int
    sequences: int
    max_tokens: int
    neighbour: str
    adjacency: str
    temperature: float
    alpha: float
    epsilon_theoretical: float
    rdp_theoretical: float
    rdp_empirical: float
    epsilon_empirical: float
    tokens: int
    per_token: list[float] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ratio(self) -> float | None:
        return self.epsilon_empirical / self.epsilon_theoretical if self.epsilon_theoretical > 0 else None

    @property
    def epsilon_empirical_x2(self) -> float:
        return 2.0 * self.epsilon_empirical

    def to_dict(self, *, per_token: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "target_epsilon": self.target_epsilon,
            "delta": self.delta,
            "clip": self.clip,
            "batch_size": self.batch_size,
            "sequences": self.sequences,
            "max_tokens": self.max_tokens,
            "compositions": self.sequences * self.max_tokens,
            "neighbour": self.neighbour,
            "adjacency": self.adjacency,
            "temperature": self.temperature,
            "alpha": self.alpha,
            "epsilon_theoretical": self.epsilon_theoretical,
            "epsilon_empirical": self.epsilon_empirical,
            "ratio": self.ratio,
            "epsilon_empirical_x2": self.epsilon_empirical_x2,
            "ratio_x2": (self.epsilon_empirical_x2 / self.epsilon_theoretical) if self.epsilon_theoretical > 0 else None,
            "rdp_theoretical": self.rdp_theoretical,
            "rdp_empirical": self.rdp_empirical,
            "tokens": self.tokens,
            "max_token_loss": max(self.per_token) if self.per_token else 0.0,
            "seconds": self.seconds,
        }
        if per_token:
            d["per_token"] = list(self.per_token)
        return d


def audit_decoding(
    lm: Any,
    batches: Sequence[Sequence[str]],
    *,
    clip: float,
    delta: float,
    max_tokens: int,
    target_epsilon: float | None = None,
    temperature: float | None = None,
    neighbour: Neighbour = "zero-out",
    orders: Any = ICLINF_ORDERS,
    rng: np.random.Generator,
    reencode: bool = False,
    progress: ProgressFn | None = None,
) -> DecodingAudit:
    """Run Algorithm 1 on each batch of s prompts (one sequence per batch, at most ``max_tokens``,
    stops at EOS) and audit it (module doc). Theory charges N_gen x T_max tokens."""
    if not batches:
        raise ValueError("need at least one batch of prompts")
    s = len(batches[0])
    if any(len(b) != s for b in batches):
        raise ValueError("every batch needs the same number s of prompts")
    if max_tokens < 1:
        raise ValueError("max_tokens must be >= 1")
    th = theoretical(clip=clip, batch_size=s, compositions=len(batches) * max_tokens, delta=delta,
                     neighbour=neighbour, target_epsilon=target_epsilon, temperature=temperature, orders=orders)
    tau, alpha = th.temperature, th.alpha
    per_token: list[float] = []
    texts: list[str] = []
    t0 = time.perf_counter()

    def choose(logits: np.ndarray) -> tuple[int, dict[str, Any]]:
        tok = sample_token(logits, clip, tau, rng)  # the mechanism's own sampler
        loss = step_loss(logits, clip, tau, alpha, neighbour)
        per_token.append(loss.loss)
        return tok, {"token": tok, "loss": loss.loss, "prompt": loss.prompt}

    for k, prompts in enumerate(batches):
        out = decode(lm, list(prompts), choose, max_tokens, stops=None, reencode=reencode)
        texts.append(out.text)
        if progress is not None:
            progress((k + 1) / len(batches), f"sequence {k + 1} of {len(batches)}")
    rdp_emp = float(math.fsum(per_token))  # Thm C.7
    return DecodingAudit(
        target_epsilon=target_epsilon, delta=delta, clip=clip, batch_size=s, sequences=len(batches),
        max_tokens=max_tokens, neighbour=neighbour, adjacency=th.adjacency, temperature=tau, alpha=alpha,
        epsilon_theoretical=th.epsilon, rdp_theoretical=th.rdp_at_alpha, rdp_empirical=rdp_emp,
        epsilon_empirical=empirical_epsilon(rdp_emp, alpha, delta), tokens=len(per_token), per_token=per_token,
        texts=texts, seconds=time.perf_counter() - t0,
    )


def audit_grid(
    lm: Any,
    batches: Sequence[Sequence[str]],
    *,
    targets: Sequence[float],
    deltas: Sequence[float],
    clip: float,
    max_tokens: int,
    neighbour: Neighbour = "zero-out",
    orders: Any = ICLINF_ORDERS,
    seed: int = 0,
    progress: ProgressFn | None = None,
) -> list[DecodingAudit]:
    """Figure 6: one audited run per (target epsilon, delta); tau re-calibrated for each."""
    cells = [(float(t), float(d)) for d in deltas for t in targets]
    out = []
    for k, (t, d) in enumerate(cells):
        def prog(f: float, msg: str, k: int = k, t: float = t, d: float = d) -> None:
            if progress is not None:
                progress((k + f) / len(cells), f"decoding audit: target {t:g}, delta {d:g}: {msg}")

        prog(0.0, "calibrating")
        out.append(audit_decoding(lm, batches, clip=clip, delta=d, max_tokens=max_tokens, target_epsilon=t,
                                  neighbour=neighbour, orders=orders, rng=np.random.default_rng([seed, k]),
                                  progress=prog))
    if progress is not None:
        progress(1.0, "decoding audit: done")
    return out
