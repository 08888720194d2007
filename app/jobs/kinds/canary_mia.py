"""``canary_mia``: a canary membership-inference campaign (``app.audit``) as an audit job.

Config: the target (an in-process mechanism on a served model, a remote dpicl
gateway, or simulated votes), the dataset, the canary, the attack query, the
insertion, the threat models, direct or bootstrap mode, trials / bootstrap
sizes, confidence, delta and seed. Result: every estimate of ``app.audit``
side by side, the headline rigorous epsilon lower bound, per-trial summary.
Verdict: the headline bound against the claimed epsilon (the job's
``claimed_epsilon``, else the epsilon the target itself claims).
Artifacts: ``trials.csv``, ``estimates.csv``, ``roc.png`` and ``histogram.png``
(white-box), ``convergence.csv`` and ``convergence.png`` (bootstrap).
"""

from __future__ import annotations

import csv
import io
import logging
import math
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import ConfigDict, Field, model_validator

from app.jsonbody import JSONBody

from app.jobs.context import JobContext
from app.jobs import egress, secrets
from app.jobs.errors import JobConfigError, JobError
from app.jobs.registry import JobKind, Verdict, epsilon_verdict, register

log = logging.getLogger("dpicl.jobs.canary_mia")


class TargetConfig(secrets.TargetCredentials):
    model_config = ConfigDict(extra="forbid")

    type: Literal["mechanism", "remote", "simulated"] = "mechanism"
    mechanism: str | None = Field(default=None, description="classification: rnm (default) | poe | icl | zero_shot; "
                                  "generation: esa (default) | ksa | clip_softmax | poe | zero_shot | full_context")
    params: dict[str, Any] = Field(default_factory=dict, description="epsilon, delta, partitions, shots_per_partition...")
    model: str | None = Field(default=None, description="a model this worker serves (mechanism targets)")
    embedder: str | None = Field(default=None, description="generation: the embedder model (the mechanism's and "
                                 "the auditor's; default: the first this worker serves)")
    bug: str | dict[str, Any] | None = Field(default=None, description="rnm, poe: noise_quarter | noise_tenth | "
                                             "winner_only | {noise_multiplier, winner_only} (to show it is caught; "
                                             "poe: noise_quarter = lambda x4)")
    defence: Literal["none", "L0", "L1", "L2", "L3"] = Field(
        default="none", description="mechanism targets: heuristic defence (ContextLeak 4.1, App. B): L1/L2 system "
        "prompts, L3 = L2 + LLM judge that refuses on 'Attack' (direct mode only)")
    url: str | None = Field(default=None, description="remote: the gateway's base URL")
    white_box: bool = Field(default=False, description="remote: ask for internals")
    seeded: bool = Field(default=False, description="remote: send a noise seed per trial")
    retries: int = Field(default=3, ge=0, le=10, description="remote: retries of a connection error, timeout or "
                         "5xx answer, with exponential back-off; then the job fails with target_unavailable")
    retry_backoff_seconds: float = Field(default=0.25, gt=0, le=60, description="remote: wait before the first "
                                         "retry, doubled before each next one (at most 8 s, or this if larger)")
    timeout_seconds: float | None = Field(default=None, gt=0, le=3600, description="remote: per-request timeout "
                                          "(default 300 s classification, 600 s generation)")
    votes_with: list[float] | None = Field(default=None, description="simulated: clean votes with the canary")
    votes_without: list[float] | None = None

    @model_validator(mode="after")
    def _shape(self) -> TargetConfig:
        if self.type == "remote" and not self.url:
            raise ValueError("url: required for a remote target")
        if (self.votes_with is None) != (self.votes_without is None):
            raise ValueError("votes_with and votes_without go together")
        return self


class DatasetConfig(JSONBody):
    model_config = ConfigDict(extra="forbid")

    bundled: str | None = Field(default=None, description="a bundled task (default: the first bundled one)")
    size: int = Field(default=8, ge=1, le=1000, description="exemplars in the audited context")
    exemplars: list[dict[str, str]] | None = Field(default=None, description="[{input, output}] instead of bundled")
    labels: list[str] | None = None
    template: dict[str, Any] | None = None
    heldout: list[dict[str, str]] | None = Field(default=None, description="for the held-out canary")


class CanaryConfig(JSONBody):
    model_config = ConfigDict(extra="forbid")

    type: Literal["hex", "unigram", "false_fact", "heldout"] = "hex"
    label: str | None = Field(default=None, description="the canary's label (default: the rarest task label)")
    text: str | None = Field(default=None, description="a fixed canary text instead of a generated one")


class PowerConfig(JSONBody):
    model_config = ConfigDict(extra="forbid")

    alternatives: list[Literal["noise_half", "noise_quarter", "noise_tenth", "winner_only", "no_noise",
                               "non_private"]] | None = Field(
        default=None, min_length=1,
        description="broken implementations the audit must be able to detect for a 'pass' (app.audit.power; "
        "generation: app.audit.gen_power). Default: classification noise_quarter, no_noise; generation "
        "noise_tenth, no_noise, non_private. winner_only is classification only, noise_tenth and non_private "
        "generation only")
    min_detection: float = Field(default=0.9, gt=0, lt=1, description="required P(detect) of each alternative")


class CanaryMIAConfig(JSONBody):
    model_config = ConfigDict(extra="forbid")

    target: TargetConfig = Field(default_factory=TargetConfig)
    dataset: DatasetConfig = Field(default_factory=DatasetConfig)
    canary: CanaryConfig = Field(default_factory=CanaryConfig)
    task: Literal["classification", "generation", "synthesize"] = Field(
        default="classification", description="generation: esa/ksa/clip_softmax/poe/zero_shot/full_context targets, "
        "answers decided by signal texts (tight-auditing 3.4) or the repeat attack; synthesize: the DP synthesizer "
        "(target.params: epsilon, delta, shots_per_label, max_tokens, partitions, shots_per_partition, "
        "public_top_k, adjacency); the attack reads the synthetic set (app.audit.synthesis)")
    query: str | dict[str, Any] | None = Field(default=None, description="default: inquiry (classification), "
                                               "signal_text (generation)")
    signals: list[str] | None = Field(default=None, min_length=2, max_length=2,
                                      description="generation: the signal texts [y1, y0]")
    max_tokens: int = Field(default=24, ge=1, le=256, description="generation: tokens per answer")
    insertion: Literal["contextleak", "paired"] = "paired"
    threat_model: Literal["black-box", "white-box", "both"] = "both"
    mode: Literal["direct", "bootstrap", "sequential"] = Field(
        default="direct", description="sequential: anytime-valid, stops at a violation, a pass or the cap "
        "(app.audit.sequential; generation: app.audit.gen_sequential)")
    trials: Annotated[int, Field(ge=2, le=1_000_000)] | Literal["auto"] = Field(
        default=40, description="trials (direct mode), or 'auto': the planner's count for power.alternatives "
        "(classification rnm; generation esa, clip_softmax, poe, mozo); "
        "sequential: the cap ('auto': 10000)")
    power: PowerConfig = Field(default_factory=PowerConfig)
    n_llm: int = Field(default=16, ge=1, le=10_000)
    n_sample: int = Field(default=400_000, ge=4, le=4_000_000)
    confidence: float = Field(default=0.95, gt=0, lt=1)
    delta: float | None = Field(default=None, ge=0, lt=1, description="default: the target's delta")
    statistic: Literal["margin", "positive", "reference_vector"] = "margin"
    objective: Literal["epsilon", "mu"] = "epsilon"
    threshold_fraction: float = Field(default=0.5, gt=0, lt=1)
    seed: int | None = Field(default=None, ge=0, le=2**53 - 1)

    @model_validator(mode="after")
    def _default_mechanism(self) -> CanaryMIAConfig:
        if self.target.mechanism is None:
            self.target.mechanism = {"generation": "esa", "synthesize": "synthesize"}.get(self.task, "rnm")
        if self.power.alternatives is None:
            from app.audit.gen_power import DEFAULT_GEN_REQUIRED
            from app.audit.power import DEFAULT_REQUIRED

            self.power.alternatives = list(DEFAULT_GEN_REQUIRED if self.task == "generation" else DEFAULT_REQUIRED)
        return self


SYNTH_PARAMS = {"epsilon", "delta", "shots_per_label", "max_tokens", "partitions", "shots_per_partition",
                "public_top_k", "adjacency"}


def _dataset(c: DatasetConfig):
    from app.icl import load_bundled

    if c.exemplars is not None:
        ex = [(e["input"], e["output"]) for e in c.exemplars]
        labels = c.labels or sorted({b for _, b in ex})
        heldout = [(e["input"], e["output"]) for e in (c.heldout or [])]
        template = dict(c.template or {})
    else:
        try:
            ds = load_bundled(c.bundled) if c.bundled else load_bundled()
        except ValueError as exc:
            raise JobConfigError(str(exc), param="config.dataset.bundled") from None
        ex = ds.exemplars("train")
        labels = list(c.labels or ds.labels)
        heldout = ds.exemplars("test")
        t = ds.template
        template = {"instruction": t.instruction, "input_prefix": t.input_prefix, "output_prefix": t.output_prefix}
        template.update(c.template or {})
    if len(ex) < c.size:
        raise JobConfigError(f"the dataset has {len(ex)} exemplars, fewer than size {c.size}", param="config.dataset.size")
    return ex, labels, heldout, template


GENERATION_TEMPLATE = {"instruction": "Summarize the dialogue in one sentence.", "input_prefix": "Dialogue:",
                       "output_prefix": "Summary:"}


def _generation_dataset(c: DatasetConfig):
    """(train exemplars, held-out exemplars, template): the config's, or the bundled dialogue set."""
    import json
    from pathlib import Path

    template = {**GENERATION_TEMPLATE, **(c.template or {})}
    if c.exemplars is not None:
        ex = [(e["input"], e["output"]) for e in c.exemplars]
        heldout = [(e["input"], e["output"]) for e in (c.heldout or [])]
    else:
        name = c.bundled or "gen_dialogsum"
        path = Path(__file__).resolve().parents[2] / "icl" / "data" / f"{name}.jsonl"
        if name != "gen_dialogsum" or not path.exists():
            raise JobConfigError(f"unknown bundled generation set {name!r}; use gen_dialogsum",
                                 param="config.dataset.bundled")
        rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
        ex = [(r["input"], r["output"]) for r in rows if r["split"] == "train"]
        heldout = [(r["input"], r["output"]) for r in rows if r["split"] == "test"]
    if len(ex) < c.size:
        raise JobConfigError(f"the dataset has {len(ex)} exemplars, fewer than size {c.size}", param="config.dataset.size")
    return ex, heldout, template


def _query_labels(config: CanaryMIAConfig) -> int:
    """How many labels the attack query votes over (task labels plus the strategy's literals and the
    canary's label), as ``run`` resolves it; no model is needed."""
    from app.audit.canaries import Canary
    from app.audit.queries import resolve_query

    ex, labels, _, template = _dataset(config.dataset)
    canary = Canary(config.canary.type, "0" * 16, config.canary.label or labels[0])
    try:
        return len(resolve_query(config.query or "inquiry", canary, labels, ex[:config.dataset.size], template).labels)
    except (ValueError, TypeError) as exc:
        raise JobConfigError(str(exc), param="config.query") from None


def _served(ctx: JobContext, name: str | None, kind: str, param: str):
    try:
        return ctx.runtime.get_model(name, kind)
    except KeyError:
        what = "model" if kind == "lm" else kind
        raise JobError(f"{what} {name!r} is not served by this worker", code="invalid_config", param=param) from None


def _pick(rng: np.random.Generator, exemplars: list[tuple[str, str]], size: int) -> list[tuple[str, str]]:
    """``size`` exemplars drawn without replacement (the audited context), in dataset order."""
    pick = rng.choice(len(exemplars), size=size, replace=False)
    return [exemplars[int(i)] for i in sorted(pick)]


def _rarest_label(labels: list[str], exemplars: list[tuple[str, str]]) -> str:
    counts = {lab: 0 for lab in labels}
    for _, lab in exemplars:
        if lab in counts:
            counts[lab] += 1
    return min(labels, key=lambda lab: (counts[lab], labels.index(lab)))


@register
class CanaryMIAKind(JobKind):
    name = "canary_mia"
    config_model = CanaryMIAConfig
    description = (
        "Canary membership-inference audit (ContextLeak; tight-auditing DP-ICL): canary, attack query, "
        "black-/white-box decisions, rigorous Clopper-Pearson epsilon lower bound, GDP estimate, bootstrap. "
        "Verdict: the rigorous bound against the claimed epsilon (default: the target's own claim)."
    )

    def check(self, config: CanaryMIAConfig, settings) -> None:
        from app.audit.queries import get_strategy

        if config.target.type == "remote":
            try:  # the server connects there: the webhooks' egress policy applies (app/jobs/egress.py)
                egress.check_url(config.target.url, settings, field="config.target.url")
            except egress.EgressRefused as exc:
                raise JobConfigError(str(exc), param="config.target.url") from None
        if config.mode == "sequential" or config.task != "synthesize":
            from app.jobs.kinds.canary_design import check_runnable, check_sequential

            if config.mode == "sequential":
                check_sequential(config)
            check_runnable(config)
        if config.task == "generation":
            self._check_generation(config)
            return
        if config.task == "synthesize":
            self._check_synthesize(config)
            return
        if config.statistic == "reference_vector":
            raise JobConfigError("reference_vector needs a noisy mean embedding: task generation",
                                 param="config.statistic")
        gen_only = [a for a in config.power.alternatives or [] if a in ("noise_tenth", "non_private")]
        if gen_only:
            raise JobConfigError(f"{gen_only[0]} is a generation alternative; classification: noise_half, "
                                 "noise_quarter, winner_only, no_noise", param="config.power.alternatives")
        try:
            get_strategy(config.query or "inquiry")
        except (ValueError, TypeError) as exc:
            raise JobConfigError(str(exc), param="config.query") from None
        t = config.target
        if t.bug is not None:
            from app.audit.noise import parse_bug

            try:
                parse_bug(t.bug)
            except ValueError as exc:
                raise JobConfigError(str(exc), param="config.target.bug") from None
        if config.mode == "bootstrap" and t.mechanism not in ("rnm", "poe"):
            raise JobConfigError("bootstrap re-applies the mechanism's noise: use mechanism rnm or poe",
                                 param="config.target.mechanism")
        if config.mode == "bootstrap" and t.type == "remote" and not t.white_box:
            raise JobConfigError(
                "a remote bootstrap re-applies the auditor's noise to the gateway's clean votes, so it never observes "
                "the gateway's own noise: set target.white_box (the gateway's noisy votes are then tested against the "
                "claim, app.audit.conformance), or use mode direct with trials from POST /v1/audits/plan",
                param="config.mode")
        if config.trials == "auto" and config.mode != "sequential":
            if config.mode != "direct":
                raise JobConfigError("trials 'auto' plans direct-mode trials; bootstrap uses n_llm/n_sample",
                                     param="config.trials")
            plan = self.plan(config, None)
            if plan["configured"]["trials"] is None and not (t.white_box and any(
                    d["threat_model"] == "white-box" and d["trials"] for d in plan["designs"])):
                raise JobConfigError("trials 'auto': no trial count detects " + ", ".join(config.power.alternatives)
                                     + " with this design: " + "; ".join(plan["configured"]["reasons"])
                                     + " (POST /v1/audits/plan shows designs that do)", param="config.trials")
        if t.defence not in ("none", "L0"):
            if t.type != "mechanism":
                raise JobConfigError("defences wrap in-process mechanism targets only", param="config.target.defence")
            if t.defence == "L3" and config.mode == "bootstrap":
                raise JobConfigError("the L3 judge filters each release after the noise; use mode direct",
                                     param="config.target.defence")

    def plan(self, config: CanaryMIAConfig, claimed_epsilon: float | None,
             seconds_per_trial: float | None = None, embedder: Any = None) -> dict[str, Any]:
        """The planner (``app.audit.planner``; generation: ``app.audit.gen_power``) for this config's
        target and a claim (default: the mechanism's own epsilon). ``embedder``: the server's (the
        generation design model measures the signal texts' distance with it)."""
        from app.audit.noise import rnm_noise
        from app.audit.planner import plan_audit

        t = config.target
        if config.task == "generation":
            from app.jobs.kinds.canary_gen import plan_generation_audit

            return plan_generation_audit(config, claimed_epsilon, seconds_per_trial, embedder)
        if config.task != "classification" or t.mechanism != "rnm":
            raise JobConfigError("the planner covers classification targets with rnm (its design model counts votes)",
                                 param="config.target.mechanism")
        n = config.dataset.size
        params = dict(t.params)
        if t.type == "simulated":  # simulated votes: T partitions of one shot (the job's own default)
            params.setdefault("partitions", 4)

        def noise_for(parts: int, shots: int):
            return rnm_noise({**params, "partitions": parts, "shots_per_partition": shots}, max(n, parts * shots))

        try:
            shots0 = int(params.get("shots_per_partition") or 1)
            parts0 = int(params.get("partitions") or max(1, n // shots0))
            base = noise_for(parts0, shots0) if parts0 * shots0 <= n else noise_for(1, 1)
        except (ValueError, TypeError) as exc:
            raise JobConfigError(str(exc), param="config.target.params") from None
        claim = float(claimed_epsilon if claimed_epsilon is not None else base.epsilon)
        offers_wb = t.white_box or t.type != "remote"
        tms = 2 if (config.threat_model == "both" and offers_wb) else 1
        delta = float(config.delta if config.delta is not None else base.delta)
        labels = _query_labels(config)
        try:
            out = plan_audit(noise_for, labels=labels, exemplars=n, partitions=parts0, shots_per_partition=shots0,
                             claimed_epsilon=claim, confidence=config.confidence, delta=delta,
                             alternatives=list(config.power.alternatives), min_detection=config.power.min_detection,
                             threat_models=tms, floor=labels == 2 and t.defence != "L3", white_box=offers_wb,
                             seconds_per_trial=seconds_per_trial)
        except ValueError as exc:
            raise JobConfigError(str(exc), param="config.target.params") from None
        out["notes"].append(f"planned for the query's {labels} labels, dataset.size {n} exemplars and "
                            f"{tms} threat model(s) (Bonferroni); a design sets target.params partitions and "
                            "shots_per_partition")
        return out

    def _trials(self, ctx: JobContext, config: CanaryMIAConfig) -> tuple[int, dict[str, Any] | None]:
        if config.trials != "auto":
            return int(config.trials), None
        if config.task == "generation":
            from app.jobs.kinds.canary_gen import planned_trials

            return planned_trials(config, ctx.claimed_epsilon,
                                  _served(ctx, config.target.embedder, "embedder", "config.target.embedder"))
        plan = self.plan(config, ctx.claimed_epsilon)
        wb = [d for d in plan["designs"] if d["threat_model"] == "white-box" and d["trials"]]
        if plan["configured"]["trials"] is not None:
            n = plan["configured"]["trials"]
        elif wb and config.target.white_box or wb and config.target.type != "remote":
            n = wb[0]["trials"]
        else:
            raise JobConfigError("trials 'auto': no trial count detects the alternatives with this design",
                                 param="config.trials")
        return int(n), plan

    def verdict(self, result: dict[str, Any], claimed_epsilon: float | None, claimed_delta: float | None) -> Verdict | None:
        """violation: the rigorous bound exceeds the claim, or the target's noise does not conform to
        it; pass: neither, and the audit had the power to see a violation (``result["power"]``);
        inconclusive otherwise. The reason goes to ``result["verdict_reason"]``."""
        claim = claimed_epsilon if claimed_epsilon is not None else result.get("epsilon_claimed")
        if result.get("mode") == "sequential":
            from app.jobs.kinds import canary_seq

            return canary_seq.verdict(result, claim)  # type: ignore[return-value]
        # delta is an input of the bound (config.delta), not a measurement: the verdict is on epsilon.
        v = epsilon_verdict(result.get("epsilon"), None, claim, None)
        if v is None:
            return None
        findings = [f for key in ("conformance", "release_floor") for f in
                    ((result.get(key) or {}).get("findings") or []) if not (result.get(key) or {}).get("conformant", True)]
        if findings:
            result["verdict_reason"] = "implementation does not match its claim: " + "; ".join(findings)
            return "violation"
        if v == "violation":
            result["verdict_reason"] = (f"the rigorous lower bound {result['epsilon']:.4g} exceeds the claimed "
                                        f"epsilon {claim:g} (confidence {result.get('confidence')})")
            return "violation"
        power = result.get("power")
        if not power:
            why = result.get("power_unknown") or f"no noise model for {result.get('target')}"
            result["verdict_reason"] = f"no violation seen, but the power of this audit is unknown ({why}): not a pass"
            return "inconclusive"
        if abs(float(power["claimed_epsilon"]) - float(claim)) > 1e-12 * max(1.0, abs(float(claim))):
            result["verdict_reason"] = "the power was computed for another claim"
            return "inconclusive"
        if power.get("sufficient"):
            dets = ", ".join(f"{k} {power['alternatives'][k]['detection']:.3g}" for k in power["required"])
            result["verdict_reason"] = (f"bound {result['epsilon']:.4g} <= claim {claim:g}, and the audit could have "
                                        f"seen a violation: P(detect) {dets}")
            return "pass"
        result["verdict_reason"] = "no violation seen, but this audit could not have seen one: " + \
            "; ".join(power.get("reasons") or []) + (f"; {power['advice']}" if power.get("advice") else "")
        return "inconclusive"

    def run(self, ctx: JobContext, config: CanaryMIAConfig) -> dict[str, Any]:
        from app.audit import (
            MechanismTarget,
            RemoteTarget,
            SimulatedVotingTarget,
            make_canary,
            resolve_query,
            rnm_noise,
        )
        from app.audit.canaries import Canary

        if config.task == "generation":
            return self._run_generation(ctx, config)
        if config.task == "synthesize":
            return self._run_synthesize(ctx, config)
        rng = np.random.default_rng(config.seed)
        ctx.progress(0.01, "preparing the canary and the context")
        all_ex, labels, heldout, template = _dataset(config.dataset)
        exemplars = _pick(rng, all_ex, config.dataset.size)
        t = config.target
        lm = _served(ctx, t.model, "lm", "config.target.model") if t.type == "mechanism" else None
        c = config.canary
        label = c.label or _rarest_label(labels, exemplars)
        try:
            if c.text is not None:
                canary = Canary(c.type, c.text, label)
            else:
                canary = make_canary(c.type, rng, label=label, dataset_texts=[a for a, _ in all_ex],
                                     heldout=heldout, tokenizer=lm)
            attack = resolve_query(config.query or "inquiry", canary, labels, exemplars, template)
        except ValueError as exc:
            raise JobConfigError(str(exc), param="config.canary") from None
        if t.type == "mechanism":
            target = MechanismTarget(lm, t.mechanism, t.params, template, bug=t.bug, defence=t.defence)
        elif t.type == "remote":
            target = RemoteTarget(t.url, t.mechanism, dict(t.params), template, white_box=t.white_box,
                                  seeded=t.seeded, **_remote_access(ctx, t), **_timeout(t))
        else:
            noise = rnm_noise({**t.params, "partitions": t.params.get("partitions", 4)},
                              max(config.dataset.size, int(t.params.get("partitions", 4))), t.bug)
            vw, vo = t.votes_with, t.votes_without
            if vw is None:
                # One vote moves (tight-auditing Lemma 3.1, b = 1): [1, T-1] with, [0, T] without.
                parts = int(t.params.get("partitions", 4))
                vw, vo = np.zeros(len(attack.labels)), np.zeros(len(attack.labels))
                other = attack.negative_index if attack.negative_index is not None else \
                    next(i for i in range(len(attack.labels)) if i != attack.positive_index)
                vw[attack.positive_index], vw[other] = 1, parts - 1
                vo[other] = parts
            target = SimulatedVotingTarget(vw, vo, noise)
        if config.mode == "sequential":
            from app.audit.campaign import _partitions
            from app.jobs.kinds import canary_seq

            out = canary_seq.run(ctx, config, target, exemplars, attack, rng, _partitions(target, len(exemplars)))
            ctx.progress(1.0, "done")
            return out
        out = self._campaign(ctx, config, target, exemplars, canary, config.query or "inquiry", labels, template, rng)
        if isinstance(target, MechanismTarget) and target.defence != "none":
            out["defence"] = {"level": target.defence, "judge_calls": target.judge_calls,
                              "refusals": target.refusals}
        return self._finish(ctx, out)

    # -- generation targets ---------------------------------------------------------------------

    def _check_generation(self, config: CanaryMIAConfig) -> None:
        from app.audit.gen_queries import get_generation_strategy
        from app.mechanisms.errors import UnknownMechanismError
        from app.mechanisms.generation import get_generation_mechanism

        try:
            get_generation_strategy(config.query or "signal_text")
        except (ValueError, TypeError) as exc:
            raise JobConfigError(str(exc), param="config.query") from None
        t = config.target
        if t.type == "simulated":
            raise JobConfigError("simulated targets vote: use task classification", param="config.target.type")
        try:
            mech = get_generation_mechanism(t.mechanism)
        except UnknownMechanismError as exc:
            raise JobConfigError(exc.message, param="config.target.mechanism") from None
        if t.bug is not None:
            raise JobConfigError("bugs are implemented for classification rnm/poe", param="config.target.bug")
        if t.defence not in ("none", "L0") and t.type != "mechanism":
            raise JobConfigError("defences wrap in-process mechanism targets only", param="config.target.defence")
        if t.defence == "L3" and config.mode == "bootstrap":
            raise JobConfigError("the L3 judge filters each answer after the noise; use mode direct",
                                 param="config.target.defence")
        if config.mode == "bootstrap" and mech.name != "esa":
            raise JobConfigError("the generation bootstrap re-applies ESA's Gaussian noise: use mechanism esa",
                                 param="config.target.mechanism")
        if config.statistic == "positive":
            raise JobConfigError("generation statistics: margin (signal distances) or reference_vector",
                                 param="config.statistic")
        if config.trials == "auto" and config.mode == "bootstrap":
            raise JobConfigError("trials 'auto' plans direct generation audits (the bootstrap uses n_llm/n_sample)",
                                 param="config.trials")
        from app.audit.gen_power import GEN_ALTERNATIVES

        bad = [a for a in config.power.alternatives or [] if a not in GEN_ALTERNATIVES]
        if bad:
            raise JobConfigError(f"{bad[0]} is a classification alternative; generation: "
                                 + ", ".join(a for a in GEN_ALTERNATIVES if a != "claimed"),
                                 param="config.power.alternatives")
        if config.signals is not None and config.signals[0] == config.signals[1]:
            raise JobConfigError("the two signal texts must differ", param="config.signals")

    def _run_generation(self, ctx: JobContext, config: CanaryMIAConfig) -> dict[str, Any]:
        from app.audit import make_canary
        from app.audit.canaries import Canary
        from app.audit.gen_targets import GenerationMechanismTarget, RemoteGenerationTarget

        rng = np.random.default_rng(config.seed)
        ctx.progress(0.01, "preparing the canary and the context")
        all_ex, heldout, template = _generation_dataset(config.dataset)
        exemplars = _pick(rng, all_ex, config.dataset.size)
        t = config.target
        embedder = _served(ctx, t.embedder, "embedder", "config.target.embedder")
        lm = _served(ctx, t.model, "lm", "config.target.model") if t.type == "mechanism" else None
        c = config.canary
        try:
            if c.text is not None:
                canary = Canary(c.type, c.text, c.label or c.text)
            else:
                canary = make_canary(c.type, rng, label="-", dataset_texts=[a for a, _ in all_ex], heldout=heldout,
                                     tokenizer=lm)
                if c.type != "heldout":  # a generation record: the canary is its own output unless given one
                    canary = Canary(canary.kind, canary.text, c.label or canary.text)
        except ValueError as exc:
            raise JobConfigError(str(exc), param="config.canary") from None
        if t.type == "mechanism":
            target = GenerationMechanismTarget(lm, embedder, t.mechanism, t.params, template, config.max_tokens,
                                               defence=t.defence)
        else:
            target = RemoteGenerationTarget(t.url, embedder, t.mechanism, dict(t.params), template,
                                            white_box=t.white_box, seeded=t.seeded, max_tokens=config.max_tokens,
                                            **_remote_access(ctx, t), **_timeout(t))
        if config.mode == "sequential":
            from app.jobs.kinds import canary_gen_seq

            out = canary_gen_seq.run(ctx, config, target, exemplars, canary, rng)
            ctx.progress(1.0, "done")
            return out
        out = self._campaign(ctx, config, target, exemplars, canary, config.query or "signal_text", [], template, rng)
        out["target_calls"] = target.calls
        if getattr(target, "defence", "none") != "none":
            out["defence"] = {"level": target.defence, "judge_calls": target.judge_calls,
                              "refusals": target.refusals}
        return self._finish(ctx, out)

    # -- the synthesizer ----------------------------------------------------------------------------

    def _check_synthesize(self, config: CanaryMIAConfig) -> None:
        t = config.target
        if t.type != "mechanism" or t.mechanism != "synthesize":
            raise JobConfigError("task synthesize audits the in-process synthesizer: target type mechanism, "
                                 "mechanism synthesize", param="config.target.mechanism")
        if t.bug is not None or t.defence not in ("none", "L0"):
            raise JobConfigError("bugs and defences are not implemented for the synthesizer", param="config.target.bug")
        if config.mode != "direct" or config.trials == "auto":
            raise JobConfigError("the synthesizer audit runs direct trials: give a number of trials",
                                 param="config.trials")
        if int(config.trials) < 4:
            raise JobConfigError("at least 4 trials (threshold selection and evaluation halves)", param="config.trials")
        unknown = set(t.params) - SYNTH_PARAMS
        if unknown:
            raise JobConfigError(f"unknown parameter; known: {', '.join(sorted(SYNTH_PARAMS))}",
                                 param=f"config.target.params.{sorted(unknown)[0]}")
        if config.canary.type == "heldout":
            raise JobConfigError("use a hex, unigram or false_fact canary (a made-up record the model cannot know)",
                                 param="config.canary.type")
        self._synth_plan(config, *_dataset(config.dataset)[:2])

    @staticmethod
    def _synth_plan(config: CanaryMIAConfig, exemplars, labels):
        from collections import Counter

        from app.mechanisms import synthesize as syn
        from app.mechanisms.errors import MechanismParamError

        p = dict(config.target.params)
        counts = Counter(y for _, y in exemplars[:config.dataset.size])
        labs = [y for y in labels if counts.get(y)]
        try:
            return syn.plan(epsilon=p.get("epsilon", 8.0), delta=p.get("delta", 1e-5), labels=labs,
                            label_counts=counts, shots_per_label=p.get("shots_per_label", 1),
                            max_tokens=p.get("max_tokens", 8), partitions=p.get("partitions"),
                            shots_per_partition=p.get("shots_per_partition"),
                            public_top_k=p.get("public_top_k", syn.DEFAULT_PUBLIC_TOP_K),
                            adjacency=p.get("adjacency", "replace-one"))
        except MechanismParamError as exc:
            raise JobConfigError(exc.message, param=f"config.target.params.{exc.param}") from None

    def _run_synthesize(self, ctx: JobContext, config: CanaryMIAConfig) -> dict[str, Any]:
        from app.audit import make_canary
        from app.audit.canaries import Canary
        from app.audit.synthesis import run_synthesis_audit
        from app.mechanisms import synthesize as syn

        rng = np.random.default_rng(config.seed)
        ctx.progress(0.01, "preparing the canary and the context")
        all_ex, labels, heldout, template = _dataset(config.dataset)
        exemplars = _pick(rng, all_ex, config.dataset.size)
        lm = _served(ctx, config.target.model, "lm", "config.target.model")
        cfg = self._synth_plan(config, exemplars, labels)
        c = config.canary
        label = c.label or _rarest_label(list(cfg.labels), exemplars)
        try:
            canary = Canary(c.type, c.text, label) if c.text is not None else make_canary(
                c.type, rng, label=label, dataset_texts=[a for a, _ in all_ex], heldout=heldout, tokenizer=lm)
        except ValueError as exc:
            raise JobConfigError(str(exc), param="config.canary") from None
        cost = syn.cost(cfg)
        prefix = str(template.get("input_prefix") or "Text:")

        def once(context, g):
            # Unfiltered (every non-empty text): the degenerate-demonstration filter is post-processing and
            # could only hide a copied canary (a hex canary reads as non-words) from the attack.
            return syn.synthesize(lm, context, cfg, input_prefix=prefix, rng=g, on_step=ctx.checkpoint,
                                  filter_degenerate=False).examples

        delta = float(config.delta if config.delta is not None else cfg.delta)
        try:
            res = run_synthesis_audit(once, exemplars, canary.text, canary.label, trials=int(config.trials), rng=rng,
                                      epsilon_claimed=float(cost["epsilon"]), delta=delta,
                                      confidence=config.confidence, threshold_fraction=config.threshold_fraction,
                                      progress=lambda f, m: ctx.progress(0.02 + 0.93 * f, m))
        except ValueError as exc:
            raise JobConfigError(str(exc), param="config.trials") from None
        ctx.progress(0.96, "writing artifacts")
        ctx.add_artifact("trials.csv", "text/csv", _rows_csv(res.trials))
        out = {"task": "synthesize", "target": "synthesize", "epsilon": res.epsilon,
               "epsilon_claimed": res.epsilon_claimed, "epsilon_theory": res.epsilon_claimed, "delta": delta,
               "confidence": config.confidence, "threshold": res.threshold, "estimates": res.estimates,
               "summary": res.summary, "canary": canary.to_dict(), "synthesizer": cfg.to_dict(),
               "trials_total": len(res.trials), "trials": res.trials[:200], "exemplar_count": len(exemplars),
               "power": None}
        ctx.progress(1.0, "done")
        return out

    # -- shared -----------------------------------------------------------------------------------

    def _campaign(self, ctx: JobContext, config: CanaryMIAConfig, target, exemplars, canary, query, labels,
                  template, rng) -> dict[str, Any]:
        """Run the campaign (closing a remote target's client) and shape the result; the artifacts
        are written by :meth:`_finish`."""
        from app.audit import CampaignConfig, run_campaign, summary

        tm = ("black-box", "white-box") if config.threat_model == "both" else (config.threat_model,)
        if not target.white_box:
            tm = tuple(x for x in tm if x == "black-box") or tm
        trials, plan = self._trials(ctx, config)
        cc = CampaignConfig(trials=trials, insertion=config.insertion, threat_models=tm, mode=config.mode,
                            confidence=config.confidence, delta=config.delta,
                            threshold_fraction=config.threshold_fraction, objective=config.objective,
                            statistic=config.statistic, n_llm=config.n_llm, n_sample=config.n_sample,
                            signals=None if config.signals is None else tuple(config.signals))
        from app.jobs.kinds.canary_seq import target_failures

        with target_failures(target):
            res = run_campaign(target, exemplars, canary, query, task_labels=labels, template=template, config=cc,
                               rng=rng, progress=lambda f, m: ctx.progress(0.02 + 0.88 * f, m))
        out = res.to_dict()
        if plan is not None:
            out["plan"] = plan
        claim = ctx.claimed_epsilon if ctx.claimed_epsilon is not None else res.epsilon_claimed
        if claim is not None and config.task == "generation":
            from app.jobs.kinds.canary_gen import generation_power

            out.update(generation_power(res, target, len(exemplars), float(claim), config))
        if claim is not None and config.task == "classification":
            from app.audit.campaign import assess_power

            rep = assess_power(res, target, len(exemplars), float(claim), required=config.power.alternatives,
                               min_detection=config.power.min_detection)
            out["power"] = None if rep is None else rep.to_dict()
        out["trials_total"] = len(res.trials)
        out["trials"] = res.trials[:200]  # all of them in trials.csv
        out["summary"] = summary(res)
        out["exemplar_count"] = len(exemplars)
        out["epsilon_theory"] = res.epsilon_claimed
        out["_campaign"] = res
        return out

    def _finish(self, ctx: JobContext, out: dict[str, Any]) -> dict[str, Any]:
        ctx.progress(0.92, "writing artifacts")
        self._artifacts(ctx, out.pop("_campaign"), out)
        ctx.progress(1.0, "done")
        return out

    def _artifacts(self, ctx: JobContext, res, out: dict[str, Any]) -> None:
        from app.audit import plots

        ctx.add_artifact("trials.csv", "text/csv", _rows_csv(res.trials))
        rows = []
        for tm, e in res.estimates.items():
            d = e.to_dict()
            d.pop("assumptions", None)
            rows.append(d)
        ctx.add_artifact("estimates.csv", "text/csv", _rows_csv(rows))
        title = f"{res.attack.strategy} / {res.attack.canary.kind} canary on {res.target}"
        try:
            if res.statistic_with is not None and len(res.statistic_with) and len(res.statistic_without):
                bb = res.estimates.get("black-box")
                ctx.add_artifact("roc.png", "image/png", plots.roc_png(
                    res.statistic_with, res.statistic_without, title=title,
                    black_box_point=None if bb is None else (bb.fpr, bb.tpr)))
                ctx.add_artifact("histogram.png", "image/png", plots.histogram_png(
                    res.statistic_with, res.statistic_without, title=title, threshold=res.threshold))
            if res.bootstrap is not None:
                ctx.add_artifact("convergence.csv", "text/csv", _rows_csv(res.bootstrap.convergence))
                ctx.add_artifact("convergence.png", "image/png", plots.convergence_png(
                    res.bootstrap.convergence, title=f"bootstrap: {title}", epsilon_theory=res.epsilon_claimed))
        except Exception as exc:  # a plot never fails the job; say why it is missing
            log.warning("canary_mia job %s: no plot (%s)", ctx.job_id, exc)
            out.setdefault("warnings", []).append(f"no plot: {type(exc).__name__}: {exc}")


def _remote_access(ctx: JobContext, t: TargetConfig) -> dict[str, Any]:
    """The remote target's key (resolved in memory only), the egress-vetting transport and the retry policy."""
    from app.audit import RetryPolicy

    try:  # the settings may have changed since submit
        egress.check_url(t.url, ctx.settings, field="config.target.url")
    except egress.EgressRefused as exc:
        raise JobError(str(exc), code="egress_refused", param="config.target.url") from None
    return {"api_key": secrets.resolve(t, ctx.settings),
            "transport": egress.VettingTransport(ctx.settings, keepalive=4),
            "retry": RetryPolicy(attempts=t.retries + 1, backoff_seconds=t.retry_backoff_seconds,
                                 max_backoff_seconds=max(8.0, t.retry_backoff_seconds))}


def _timeout(t: TargetConfig) -> dict[str, Any]:
    return {} if t.timeout_seconds is None else {"timeout": t.timeout_seconds}


def _rows_csv(rows: list[dict[str, Any]]) -> bytes:
    buf = io.StringIO()
    if rows:
        cols: list[str] = []
        for r in rows:
            cols.extend(k for k in r if k not in cols)
        w = csv.writer(buf)
        w.writerow(cols)
        for r in rows:
            w.writerow([_cell(r.get(k)) for k in cols])
    return buf.getvalue().encode()


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ""
    if isinstance(v, (list, tuple)):
        return " ".join(_cell(x) for x in v)
    return str(v)
