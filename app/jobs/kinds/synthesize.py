"""``synthesize``: DP synthetic few-shot demonstrations from a private classification set, as a job.

The algorithm is ``app.mechanisms.synthesize`` (Tang et al. 2024 Alg. 1). The job:

1. at submission (``admit``): the dataset exists, is a private classification set of the caller's
   tenant, the parameters plan (422 naming ``config.<field>``) and the budget can pay (429,
   ``config.epsilon``);
2. charges the WHOLE cost once against the parent's ledger before any model work, with the
   idempotency key ``synthesize:<job id>``: a restarted attempt finds its charge and never pays
   twice; the charge commits before anything is released, so a crash never loses it;
3. generates (progress per example, cancel at every token);
4. stores the synthetic set as a new ``public`` dataset whose id is derived from the job id, in
   one transaction: a restart after that finds it and returns it, so one charge is never released
   as two different synthetic sets.

A cancel or a non-retryable failure before step 4 refunds the charge (nothing was released); a
worker shutdown or a lost lease does not (the job runs again under the same charge).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from pydantic import ConfigDict, Field

from app.jobs.context import JobContext
from app.jobs.errors import JobBudgetError, JobConfigError, JobError, JobLost, JobNotFoundError, JobShutdown, RetryableJobError
from app.jobs.registry import JobKind, register
from app.jsonbody import JSONBody, VisibleText

log = logging.getLogger("dpicl.jobs.synthesize")

SEED_POLICY_SECURE = "os-entropy (secrets.randbits(256)); not reproducible"
SEED_POLICY_SEEDED = "caller seed (DPICL_ALLOW_SEEDED_NOISE: tests and audits only)"


class SynthesizeConfig(JSONBody):
    model_config = ConfigDict(extra="forbid")

    dataset_id: str = Field(min_length=1, max_length=64, description="the private classification set (parent)")
    epsilon: float = Field(gt=0, allow_inf_nan=False, description="total epsilon of the whole synthesis")
    delta: float = Field(gt=0, lt=1, allow_inf_nan=False, description="total delta of the whole synthesis")
    shots_per_label: int = Field(ge=1, le=64, description="synthetic demonstrations per label")
    max_tokens: int = Field(default=24, ge=1, le=256, description="tokens per demonstration (all are charged)")
    partitions: int | None = Field(default=None, ge=1, le=10_000,
                                   description="disjoint subsets per label (default: as many as the smallest "
                                               "label fills, at most 64)")
    shots_per_partition: int | None = Field(default=None, ge=1, le=1000, description="private exemplars per subset")
    public_top_k: int = Field(default=20, ge=0, le=1 << 20,
                              description="candidates per token: the exemplar-free prompt's top-k (+ EOS); 0 = vocabulary")
    model: str | None = Field(default=None, description="a language model this worker serves (default: the default)")
    seed: int | None = Field(default=None, ge=0, description="noise seed; only when DPICL_ALLOW_SEEDED_NOISE")
    name: VisibleText | None = Field(default=None, min_length=1, max_length=200, description="the new dataset's name")


def _dropped_text(dropped: dict[str, int]) -> str:
    return ", ".join(f"{n} {why}" for why, n in dropped.items() if n) or "none dropped"


def synthetic_dataset_id(job_id: str) -> str:
    """The new dataset's id, a function of the job id (idempotent creation across restarts)."""
    return "ds_syn_" + hashlib.sha256(job_id.encode()).hexdigest()[:24]


def ledger_key(job_id: str) -> str:
    return f"synthesize:{job_id}"


def _plan(config: SynthesizeConfig, ds, acc):
    from app.mechanisms import synthesize as syn
    from app.mechanisms.errors import MechanismParamError

    try:
        return syn.plan(epsilon=config.epsilon, delta=config.delta, labels=list(ds.labels),
                        label_counts=dict(ds.label_counts or {}), shots_per_label=config.shots_per_label,
                        max_tokens=config.max_tokens, partitions=config.partitions,
                        shots_per_partition=config.shots_per_partition, public_top_k=config.public_top_k,
                        adjacency=acc.adjacency)
    except MechanismParamError as exc:
        raise JobConfigError(exc.message, param=f"config.{exc.param or 'epsilon'}") from None


def _load_parent(runtime, tenant_id: str, config: SynthesizeConfig):
    """(dataset, account) of the parent, checked; raises JobConfigError naming config.dataset_id."""
    from app.store import budget_repo, datasets_repo

    with runtime.db.session() as s:
        ds = datasets_repo.get_dataset(s, config.dataset_id, tenant_id)
        if ds is None:
            raise JobNotFoundError(f"dataset {config.dataset_id!r} not found", param="config.dataset_id",
                                 code="dataset_not_found")
        if ds.task != "classification":
            raise JobConfigError("synthesize makes demonstrations for classification sets", param="config.dataset_id")
        if getattr(ds, "visibility", "private") != "private":
            raise JobConfigError("the dataset is already public (nothing to protect)", param="config.dataset_id")
        acc = budget_repo.get_account(s, ds.id, tenant_id)
        if acc is None:
            raise JobConfigError("the dataset has no budget account", param="config.dataset_id")
        s.expunge_all()
        return ds, acc


@register
class SynthesizeKind(JobKind):
    name = "synthesize"
    spends_budget = True
    config_model = SynthesizeConfig
    description = (
        "DP synthetic few-shot demonstrations (Tang et al. ICLR 2024, Alg. 1) from a private classification "
        "set: charged once against its budget, stored as a new public dataset with provenance; "
        "answer from it with mechanism synthetic_icl at no further cost."
    )

    def check(self, config: SynthesizeConfig, settings) -> None:
        if config.seed is not None and not settings.allow_seeded_noise:
            raise JobConfigError("a noise seed is accepted only when the server allows seeded noise "
                                 "(DPICL_ALLOW_SEEDED_NOISE, tests and audits only)", param="config.seed")
        if config.model is not None and not any(m.name == config.model and m.kind == "lm" for m in settings.models):
            raise JobConfigError(f"model {config.model!r} is not a language model of this server",
                                 param="config.model")

    def admit(self, runtime, tenant_id: str, config: SynthesizeConfig) -> None:
        from app.budget.ledger import BudgetExhausted, Ledger
        from app.mechanisms import synthesize as syn

        ds, acc = _load_parent(runtime, tenant_id, config)
        cfg = _plan(config, ds, acc)
        from app.privacy.accountant import PrivacyCost

        try:
            with runtime.db.session() as s:
                Ledger().precheck(s, dataset_id=ds.id, tenant_id=tenant_id, cost=PrivacyCost.from_dict(syn.cost(cfg)))
        except BudgetExhausted as exc:
            raise JobBudgetError(
                f"privacy budget exhausted: epsilon {exc.epsilon_spent:.6g} of {exc.epsilon_budget:.6g} spent, "
                f"{exc.remaining:.6g} remaining; this synthesis would bring it to {exc.epsilon_would_be:.6g}",
                param="config.epsilon") from None

    def run(self, ctx: JobContext, config: SynthesizeConfig) -> dict[str, Any]:
        from app.budget.ledger import BudgetExhausted, Ledger, LedgerConflict
        from app.jobs import repository as jobs_repo
        from app.mechanisms import synthesize as syn
        from app.mechanisms.rng import secure_rng, seeded_rng
        from app.mechanisms.synth_filter import short_labels

        rt = ctx.runtime
        with rt.db.session() as s:
            job = jobs_repo.get_job(s, ctx.job_id, tenant_id=None)
            tenant_id = job.tenant_id
        new_id = synthetic_dataset_id(ctx.job_id)
        done = self._existing(rt, new_id)
        if done is not None:  # an earlier attempt released it: return that, never a second set
            return done
        ctx.progress(0.01, "planning")
        ds, acc = _load_parent(rt, tenant_id, config)
        cfg = _plan(config, ds, acc)
        cost = syn.cost(cfg)
        try:
            lm = rt.get_model(config.model, "lm")
        except KeyError:
            raise JobError(f"model {config.model!r} is not served by this worker", code="invalid_config",
                           param="config.model") from None
        from app.privacy.accountant import PrivacyCost

        ledger = Ledger()
        params = {"job_id": ctx.job_id, "synthetic_dataset_id": new_id, "model": lm.name, **cfg.to_dict()}
        try:
            with rt.db.session() as s:  # one transaction: the charge commits before any model work
                ch = ledger.charge(s, dataset_id=ds.id, tenant_id=tenant_id, cost=PrivacyCost.from_dict(cost),
                                   mechanism=syn.NAME, params=params,
                                   response={"job_id": ctx.job_id, "dataset_id": new_id},
                                   idempotency_key=ledger_key(ctx.job_id))
                s.commit()
        except BudgetExhausted as exc:
            raise JobError(f"privacy budget exhausted: this synthesis would bring epsilon to "
                           f"{exc.epsilon_would_be:.6g} of {exc.epsilon_budget:.6g}", code="budget_exhausted",
                           param="config.epsilon") from None
        except LedgerConflict:
            raise JobError("the ledger holds a different charge for this job", code="internal_error") from None
        charged_now = ch.replayed_response is None
        ctx.progress(0.03, f"charged epsilon {cost['epsilon']:.4g}; generating")
        try:
            exemplars = self._exemplars(rt, ds.id)
            rng = seeded_rng(config.seed) if config.seed is not None else secure_rng()
            total = len(cfg.labels) * cfg.shots_per_label
            res = syn.synthesize(
                lm, exemplars, cfg, input_prefix=str((ds.template or {}).get("input_prefix") or "Text:"), rng=rng,
                on_example=lambda d, t: ctx.progress(0.03 + 0.92 * d / t, f"example {d} of {t}"),
                on_step=ctx.checkpoint)
            if not res.examples:
                raise JobError(f"every synthetic demonstration came out empty or degenerate ({_dropped_text(res.dropped)}); "
                               "try more epsilon, partitions or max_tokens", code="empty_synthesis")
            short = short_labels(res.kept_per_label, cfg.shots_per_label)
            provenance = {
                "parent_dataset_id": ds.id,
                "job_id": ctx.job_id,
                "mechanism": syn.NAME,
                "algorithm": "Tang et al. ICLR 2024, Algorithm 1 (DP few-shot generation)",
                "epsilon": cost["epsilon"],
                "delta": cost["delta"],
                "adjacency": cost["adjacency"],
                "guarantee": "worst-case (data-independent) bound on the whole set; exact GDP composition",
                "parameters": cfg.to_dict(),
                "model": lm.name,
                "seed_policy": SEED_POLICY_SEEDED if config.seed is not None else SEED_POLICY_SECURE,
                "ledger_entry_id": ch.entry_id,
                "requested": len(cfg.labels) * cfg.shots_per_label,
                "kept": len(res.examples),
                # Counts only, never text: the filter reads the released texts alone (post-processing, no cost).
                "dropped": dict(res.dropped),
                "filter": "app.mechanisms.synth_filter: empty, too short, non-words, truncated, duplicates",
            }
            ctx.progress(0.97, "storing the synthetic set")
            stored = self._store(rt, new_id, tenant_id, config.name or f"{ds.name} (synthetic)", ds, res.examples,
                                 provenance)
        except BaseException as exc:
            # A shutdown, a lost lease or a retryable error runs the job again under the same charge.
            if not isinstance(exc, (JobShutdown, JobLost, RetryableJobError)) and self._existing(rt, new_id) is None:
                # Nothing was released: the charge goes back (the entry stays, marked refunded).
                with rt.db.session() as s:
                    ledger.refund(s, dataset_id=ds.id, tenant_id=tenant_id, entry_id=ch.entry_id)
                    s.commit()
                log.info("synthesize job %s: refunded its charge (%s)", ctx.job_id, type(exc).__name__)
            raise
        ctx.progress(1.0, "done")
        out = {**stored, "charged": charged_now, "seconds": res.seconds, "forward_passes": res.forward_passes,
               "examples_kept": len(res.examples), "examples_requested": total,
               "examples_dropped": dict(res.dropped), "kept_per_label": dict(res.kept_per_label)}
        if short:
            out["warnings"] = [
                f"label {y!r} kept {res.kept_per_label[y]} of {cfg.shots_per_label} demonstrations "
                f"({cfg.shots_per_label - res.kept_per_label[y]} dropped as empty or degenerate): synthetic_icl "
                "answers see too few examples of it; a new synthesis with more epsilon or partitions may do better"
                for y in short]
        return out

    # -- store ------------------------------------------------------------------------------------

    @staticmethod
    def _exemplars(rt, dataset_id: str) -> list[tuple[str, str]]:
        from app.store import datasets_repo

        with rt.db.session() as s:
            return datasets_repo.load_exemplars(s, dataset_id)

    @staticmethod
    def _result(ds) -> dict[str, Any]:
        p = ds.provenance or {}
        return {"dataset_id": ds.id, "parent_dataset_id": p.get("parent_dataset_id"), "epsilon": p.get("epsilon"),
                "delta": p.get("delta"), "adjacency": p.get("adjacency"), "mechanism": p.get("mechanism"),
                "exemplar_count": ds.exemplar_count, "label_counts": dict(ds.label_counts or {}),
                "model": p.get("model")}

    def _existing(self, rt, new_id: str) -> dict[str, Any] | None:
        from app.store import datasets_repo

        with rt.db.session() as s:
            ds = datasets_repo.get_dataset_any_tenant(s, new_id)
            return None if ds is None else {**self._result(ds), "charged": False, "resumed": True}

    def _store(self, rt, new_id, tenant_id, name, parent, examples, provenance) -> dict[str, Any]:
        from sqlalchemy.exc import IntegrityError

        from app.store import datasets_repo

        try:
            with rt.db.session() as s:
                ds = datasets_repo.create_dataset(
                    s, tenant_id=tenant_id, name=name, task="classification", labels=list(parent.labels),
                    template=dict(parent.template or {}), exemplars=examples, dataset_id=new_id,
                    visibility="public", provenance=provenance)
                s.commit()
                return self._result(ds)
        except IntegrityError:  # another attempt of this job stored it first: that one is the release
            got = self._existing(rt, new_id)
            if got is None:
                raise
            return got
