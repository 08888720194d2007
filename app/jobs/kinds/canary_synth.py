"""``canary_mia`` with ``"task": "synthesize"``: the DP synthesizer's audit (``app.audit.synthesis``):
its config checks, its plan and its run."""

from __future__ import annotations

from typing import Any

import numpy as np

from app.jobs.context import JobContext
from app.jobs.errors import JobConfigError
from app.jobs.config_view import digest_key
from app.jobs.kinds import canary_view
from app.jobs.kinds.canary_config import CanaryMIAConfig
from app.jobs.kinds.canary_data import SYNTH_PARAMS, _dataset, _pick, _rarest_label, _rows_csv, _served


def check(config: CanaryMIAConfig) -> None:
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
    plan(config, *_dataset(config.dataset)[:2])

def plan(config: CanaryMIAConfig, exemplars: Any, labels: Any) -> Any:
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

def run(ctx: JobContext, config: CanaryMIAConfig) -> dict[str, Any]:
    from app.audit import make_canary
    from app.audit.canaries import Canary
    from app.audit.synthesis import run_synthesis_audit
    from app.mechanisms import synthesize as syn

    rng = np.random.default_rng(config.seed)
    ctx.progress(0.01, "preparing the canary and the context")
    all_ex, labels, heldout, template = _dataset(config.dataset)
    exemplars = _pick(rng, all_ex, config.dataset.size)
    lm = _served(ctx, config.target.model, "lm", "config.target.model")
    cfg = plan(config, exemplars, labels)
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
           "summary": res.summary, "canary": canary_view.public_canary(
               canary, caller_text=c.text is not None, label_public=canary.label in labels,
               key=digest_key(ctx.settings)), "synthesizer": cfg.to_dict(),
           "trials_total": len(res.trials), "trials": res.trials[:200], "exemplar_count": len(exemplars),
           "power": None}
    ctx.progress(1.0, "done")
    return out
