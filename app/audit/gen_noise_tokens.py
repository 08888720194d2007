"""A white-box token-mechanism release in gen_power's design model (simulations, benchmarks, tests).

:class:`TokenWhiteBoxTarget` runs the mechanism's own step code (``clip_softmax.mean_clipped`` or
``poe_decode.clipped_utilities`` on per-unit logits, ``clip_softmax.private_chooser``'s Gumbel-argmax,
``app.mechanisms.step_trace``'s collector) on gen_power's design model: at the decisive step the
canary's unit (when the canary is read, probability ``coverage``) gives the y1 token all its mass and
every other unit the y0 token's, so the released label follows ``alternative_release`` exactly
(checked in the tests). ``extra_steps`` further private steps continue the answer (its branch is
fixed: they do not change the label) over ``candidates`` public candidates with synthetic unit
logits (a shared N(0, ``logit_sd``^2) per candidate plus N(0, ``unit_sd``^2) per unit): an
assumption standing in for a model's continuation, which the white-box evidence reads step by step.

Alternatives: "noise x f" samples at temperature f x the claimed one (the claimed statistic, scores
divided by f tau); ``no_noise`` takes the argmax (a tie broken for y1, ``ties`` "positive", or
against it); ``non_private`` releases y1 iff the canary is in the context and reports no steps.

``mozo`` (``config``: its ``configure`` for the design's params, ``gen_power.configured``) runs its own
``mozo.chooser`` (public candidates, base, lam, product of the mixed experts, Gumbel-argmax, trace):
the decisive step's public row is flat on the two tokens (the design's uniform base), the extra steps'
public row is the shared logits (the zero-shot model sees what the units share; the candidates are its
top-k). "noise x f" is mozo at temperature f tau with the claim's lam (``epsilon_per_token`` / f keeps
eps_tok / w, hence lam, so the step law is softmax(log q / f): gen_power's alternative; its true cost is
1/f x the claim's); ``no_noise`` the argmax of the same log q (``mozo.step_law``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from app.audit.gen_noise import TOKEN, compact_step
from app.audit.gen_power import GEN_ALTERNATIVES, GenerationDesign, alternative_release

_FAR = -1.0e4  # a logit the unit never says (clipped to -c by both mechanisms)


@dataclass
class TokenWhiteBoxTarget:
    design: GenerationDesign
    alternative: str | float = "claimed"
    ties: str = "positive"
    extra_steps: int = 0
    candidates: int = 20
    logit_sd: float = 2.0
    unit_sd: float = 1.0
    config: Any = None  # mozo: its configure result for the design's params (gen_power.configured)
    task: str = "generation"

    def __post_init__(self) -> None:
        d = self.design
        if d.mechanism not in TOKEN:
            raise ValueError(f"a token mechanism's design ({', '.join(TOKEN)})")
        self.f = GEN_ALTERNATIVES[self.alternative] if isinstance(self.alternative, str) else float(self.alternative)
        if d.mechanism == "mozo":
            self._mozo_post_init()
        # the mechanism's clip from the design's gap without the canary: -2c (clip_softmax), -E c (poe)
        self.clip = -d.gap_without / (2.0 if d.mechanism == "clip_softmax" else d.units)
        self.name = f"{d.mechanism}-white-box:{self.alternative}"
        self.calls = 0
        self.tracing = False
        self.law = alternative_release(d, self.alternative, self.ties) if isinstance(self.alternative, str) else None

    def trace_token_steps(self, on: bool) -> None:
        """Report the steps to the audit (``gen_sequential`` turns it on for a white-box audit)."""
        self.tracing = bool(on)

    def _mozo_post_init(self) -> None:
        cfg = self.config
        if (cfg is None or cfg.subsample or abs(float(cfg.temperature) - float(self.design.scale)) > 1e-12
                or (cfg.public_top_k is not None and cfg.public_top_k < 2)):
            raise ValueError("mozo needs its unsubsampled configure result at the design's temperature, with both "
                             "decisive tokens among its public candidates (public_top_k >= 2)")
        if self.f:  # temperature f tau with the claim's lam: eps_tok / w, and so lam, unchanged
            self.run_config = replace(cfg, temperature=float(cfg.temperature) * float(self.f),
                                      epsilon_per_token=float(cfg.epsilon_per_token) / float(self.f))

    def _mozo_step(self, logits: np.ndarray, public: np.ndarray, rng: np.random.Generator, first: bool) -> int:
        from app.mechanisms import mozo

        if self.f == 0.0:  # the argmax of the claimed step law, a tie broken for or against y1 (token 0)
            cand, lq, _, _ = mozo.step_law(self.config, logits, public, ())
            top = np.flatnonzero(lq >= lq.max() - 1e-12 * max(1.0, abs(float(lq.max()))))
            tok = int(cand[top[0] if self.ties == "positive" or not first else top[-1]])
            mozo.trace_step(cand, lq, public.size, float(self.config.temperature), tok)
            return tok
        return int(mozo.chooser(self.run_config, rng, ())(logits, public)[0])

    def statistic(self, logits: np.ndarray) -> np.ndarray:
        """The mechanism's own clean statistic of the units' logits (s, V)."""
        from app.mechanisms import clip_softmax, poe_decode

        if self.design.mechanism == "clip_softmax":
            return clip_softmax.mean_clipped(logits, self.clip)
        return poe_decode.clipped_utilities(logits, self.clip)

    def _step(self, logits: np.ndarray, rng: np.random.Generator, first: bool, public: np.ndarray) -> int:
        from app.mechanisms import step_trace
        from app.mechanisms.clip_softmax import private_chooser

        if self.design.mechanism == "mozo":
            return self._mozo_step(logits, public, rng, first)
        tau = float(self.design.scale)
        if self.f == 0.0:  # deterministic decoding: the argmax, a clean tie broken for or against y1 (token 0)
            stat = self.statistic(logits)
            top = np.flatnonzero(stat >= stat.max() - 1e-12 * max(1.0, abs(float(stat.max()))))
            tok = int(top[0] if self.ties == "positive" or not first else top[-1])
            step_trace.record(stat / tau, tau, tok)
            return tok
        t = tau * float(self.f if self.f is not None else 1.0)
        choose = private_chooser(lambda z: self.statistic(z) / t, rng, None, (), t)
        return int(choose(logits)[0])

    def observe(self, context: Sequence[tuple[str, str]], attack: Any, rng: np.random.Generator) -> Any:
        from app.audit.gen_targets import GenerationObservation
        from app.mechanisms import step_trace

        self.calls += 1
        y1, y0 = attack.labels[0], attack.labels[1]
        member = tuple(attack.canary.exemplar()) in [tuple(c) for c in context]
        if self.f is None:  # non_private: the full-context release, no private steps
            label = y1 if member else y0
            return GenerationObservation(label, None, None, text=label)
        read = member and rng.random() < self.design.coverage
        s = self.design.units
        with step_trace.collect() as steps:
            z = np.tile([_FAR, 0.0], (s, 1))  # token 0: y1's, token 1: y0's
            if read:
                z[0] = [0.0, _FAR]
            tok = self._step(z, rng, True, np.zeros(2))
            for _ in range(self.extra_steps):
                g = rng.normal(0.0, self.logit_sd, self.candidates)
                self._step(g[None, :] + rng.normal(0.0, self.unit_sd, (s, self.candidates)), rng, False, g)
        label = y1 if tok == 0 else y0
        trace = tuple(compact_step(st.statistic, st.token) for st in steps) if self.tracing else None
        return GenerationObservation(label, None, None, text=label, token_steps=trace)


__all__ = ["TokenWhiteBoxTarget"]
