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

import logging
from typing import Any

import numpy as np

from app.jobs.context import JobContext
from app.jobs import egress, secrets
from app.jobs.config_view import digest_key
from app.jobs.errors import JobConfigError, JobError
from app.jobs.registry import JobKind, Verdict, epsilon_verdict, register

from app.jobs.kinds.canary_config import (  # noqa: F401 (re-exported: the config lives there)
    CanaryConfig,
    CanaryMIAConfig,
    DatasetConfig,
    PowerConfig,
    TargetConfig,
)
from app.jobs.kinds import canary_synth, canary_view
from app.jobs.kinds.canary_data import (  # noqa: F401
    GENERATION_TEMPLATE,
    SYNTH_PARAMS,
    _dataset,
    _generation_dataset,
    _pick,
    _query_labels,
    _rarest_label,
    _rows_csv,
    _served,
    _with_decoys,
    context_notes,
    pick_context,
)

log = logging.getLogger("dpicl.jobs.canary_mia")


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
            canary_synth.check(config)
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
                             threat_models=tms, floor=labels >= 2 and t.defence != "L3", white_box=offers_wb,
                             seconds_per_trial=seconds_per_trial)
        except ValueError as exc:
            raise JobConfigError(str(exc), param="config.target.params") from None
        out["notes"].append(f"planned for the query's {labels} labels, dataset.size {n} exemplars and "
                            f"{tms} threat model(s) (Bonferroni); a design sets target.params partitions and "
                            "shots_per_partition")
        out["notes"].extend(context_notes(config, labels))
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
            mc = (power.get("design") or {}).get("model_check")
            if mc:  # a generation pass that rests on the design model: the check it passed
                result["verdict_reason"] += (
                    f" (the design model's predictions; its claimed law fits the releases: y1 in {mc['y1_with']}/"
                    f"{mc['members']} trials with the canary, {mc['y1_without']}/{mc['nonmembers']} without, law "
                    f"{mc['law'][0]:.2f} / {mc['law'][1]:.2f})")
            return "pass"
        misfit = not ((power.get("design") or {}).get("model_check") or {}).get("fits", True)
        result["verdict_reason"] = ("no violation seen, but the power of this audit is unknown: " if misfit else
                                    "no violation seen, but this audit could not have seen one: ") + \
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
            return canary_synth.run(ctx, config)
        rng = np.random.default_rng(config.seed)
        ctx.progress(0.01, "preparing the canary and the context")
        all_ex, labels, heldout, template = _dataset(config.dataset)
        exemplars, context = pick_context(rng, all_ex, config, labels)
        t = config.target
        lm = _served(ctx, t.model, "lm", "config.target.model") if t.type == "mechanism" else None
        c = config.canary
        label = c.label or _rarest_label(labels, exemplars)
        query_labels = _with_decoys(labels, config.dataset)
        try:
            if c.text is not None:
                canary = Canary(c.type, c.text, label)
            else:
                canary = make_canary(c.type, rng, label=label, dataset_texts=[a for a, _ in all_ex],
                                     heldout=heldout, tokenizer=lm)
            attack = resolve_query(config.query or "inquiry", canary, query_labels, exemplars, template)
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
        if config.mode == "bootstrap":
            from app.audit.bootstrap import check_bootstrap_size

            try:
                check_bootstrap_size(config.n_sample, len(attack.labels))
            except ValueError as exc:
                raise JobConfigError(str(exc).removeprefix("n_sample: "), param="config.n_sample") from None
        if config.mode == "sequential":
            from app.audit.target_info import target_partitions
            from app.jobs.kinds import canary_seq

            out = canary_seq.run(ctx, config, target, exemplars, attack, rng,
                                 target_partitions(target, len(exemplars)))
            out["attack"] = canary_view.of_job(ctx, config, attack, query_labels)[0]
            out["context"] = context
            ctx.progress(1.0, "done")
            return out
        out = self._campaign(ctx, config, target, exemplars, canary, config.query or "inquiry", query_labels, template,
                             rng)
        out["context"] = context
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
            out["attack"] = canary_view.of_job(ctx, config, out.pop("_attack"), [])[0]
            ctx.progress(1.0, "done")
            return out
        out = self._campaign(ctx, config, target, exemplars, canary, config.query or "signal_text", [], template, rng)
        out["target_calls"] = target.calls
        if getattr(target, "defence", "none") != "none":
            out["defence"] = {"level": target.defence, "judge_calls": target.judge_calls,
                              "refusals": target.refusals}
        return self._finish(ctx, out)

    # -- shared -----------------------------------------------------------------------------------

    def _campaign(self, ctx: JobContext, config: CanaryMIAConfig, target, exemplars, canary, query, labels,
                  template, rng) -> dict[str, Any]:
        """Run the campaign (closing a remote target's client) and shape the result; the artifacts are
        written by :meth:`_finish`. ``labels``: the task's and the decoys (public, as the planner counts them)."""
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
        # The result names private texts (canary, signals, labels that stand for them) by summary and
        # placeholder, never the text (canary_view); every number stays.
        out["attack"], names = canary_view.of_job(ctx, config, res.attack, labels)
        out["config"]["signals"] = canary_view.public_signals(out["config"].get("signals"), digest_key(ctx.settings))
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
        out["trials"] = canary_view.public_rows(res.trials[:200], names)  # all of them in trials.csv
        out["summary"] = {**summary(res), "strategy": out["attack"]["strategy"]}
        out["_names"] = names
        out["exemplar_count"] = len(exemplars)
        out["epsilon_theory"] = res.epsilon_claimed
        out["_campaign"] = res
        return out

    def _finish(self, ctx: JobContext, out: dict[str, Any]) -> dict[str, Any]:
        ctx.progress(0.92, "writing artifacts")
        self._artifacts(ctx, out.pop("_campaign"), out, out.pop("_names"))
        ctx.progress(1.0, "done")
        return out

    def _artifacts(self, ctx: JobContext, res, out: dict[str, Any], names: dict[str, str]) -> None:
        from app.audit import plots

        ctx.add_artifact("trials.csv", "text/csv", _rows_csv(canary_view.public_rows(res.trials, names)))
        rows = []
        for tm, e in res.estimates.items():
            d = e.to_dict()
            d.pop("assumptions", None)
            rows.append(d)
        ctx.add_artifact("estimates.csv", "text/csv", _rows_csv(rows))
        title = f"{out['attack']['strategy']} / {res.attack.canary.kind} canary on {res.target}"
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
