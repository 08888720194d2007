"""``iclinf``: ICLInf leakage of ICL exemplars, and the ICLInf audit of clip-softmax decoding, as a job.

Library: :mod:`app.audit.iclinf` (classification, ICLInf Sections 3-4) and
:mod:`app.audit.iclinf_decoding` (Section 5, Appendix C); docs/iclinf.md.

Config: ``models`` (loaded model names, or sources such as ``bundled:gemma3-270m``
or a hub id, loaded on demand), ``dataset`` (bundled task, a registered exemplar
set of the job's tenant, or a Hugging Face task of the paper where reachable),
``classification`` (n_shots list, m, variants, calibration on/off, seed) and/or
``decoding`` (c, s, targets or a temperature, deltas, sequences, max tokens,
neighbour). Result: per model the numbers, per-position tables, the decoding
cells, and the exact configuration. Verdict: ``violation`` when a decoding cell's
epsilon_empirical exceeds its epsilon_theoretical, or the largest
epsilon_empirical exceeds the claim; none for classification alone (ICLInf of a
non-private model is a measurement, not a DP claim).

Artifacts: ``iclinf.csv``, ``per_position.csv``, ``per_position.png``,
``n_shots.png`` (several n_shots), ``decoding.csv``, ``epsilon.png`` (Figure 6),
``config.json``. Exemplar text and generated text never enter the result, an error or a log
line: a decoding cell names its label by text only when it is a declared class label (metadata);
otherwise (a generation set's output) by ``label_exemplar``, the index of the first exemplar with
that output, and ``label_exemplars``, their count (docs/security.md, "What never leaves").
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
from typing import Any, Literal

import numpy as np
from pydantic import ConfigDict, Field, field_validator, model_validator

from app.jsonbody import JSONBody

from app.jobs.config_view import public_config
from app.jobs.context import JobContext
from app.jobs.errors import JobConfigError, JobError
from app.jobs.registry import JobKind, Verdict, epsilon_verdict, register

log = logging.getLogger("dpicl.jobs.iclinf")

_TOL = 1e-9


class DatasetRef(JSONBody):
    model_config = ConfigDict(extra="forbid")

    source: Literal["bundled", "registered", "hf"] = "bundled"
    name: str | None = Field(default=None, description="bundled task name, or HF task (ag_news, dbpedia_14, trec)")
    id: str | None = Field(default=None, description="registered dataset id (source 'registered')")
    limit: int | None = Field(default=None, ge=1, le=1_000_000, description="HF tasks: rows per split")

    @model_validator(mode="after")
    def _ref(self) -> DatasetRef:
        if self.source == "registered" and not self.id:
            raise ValueError("id: required for source 'registered'")
        if self.source == "hf" and not self.name:
            raise ValueError("name: required for source 'hf'")
        return self


class ClassificationConfig(JSONBody):
    model_config = ConfigDict(extra="forbid")

    n_shots: list[int] = Field(default_factory=lambda: [4], min_length=1, max_length=16)
    m: int = Field(default=100, ge=1, le=100_000)
    variants: list[Literal["label", "full"]] = Field(default_factory=lambda: ["label"], min_length=1)
    calibrate: list[bool] = Field(default_factory=lambda: [False], min_length=1, max_length=2)
    template: str | dict[str, Any] | None = Field(default=None, description="app.icl preset or fields; default: the dataset's")
    seed: int = Field(default=0, ge=0, le=2**53 - 1)

    @field_validator("n_shots")
    @classmethod
    def _shots(cls, v: list[int]) -> list[int]:
        if any(n < 1 or n > 64 for n in v):
            raise ValueError("each n_shots must be in [1, 64]")
        if len(set(v)) != len(v):
            raise ValueError("n_shots must not repeat")
        return v


class DecodingConfig(JSONBody):
    model_config = ConfigDict(extra="forbid")

    clip: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    batch_size: int = Field(default=8, ge=2, le=512, description="s one-shot prompts per sequence")
    targets: list[float] | None = Field(default=None, min_length=1, max_length=64)
    temperature: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    deltas: list[float] = Field(default_factory=lambda: [1e-5], min_length=1, max_length=16)
    sequences: int = Field(default=1, ge=1, le=10_000)
    max_tokens: int = Field(default=8, ge=1, le=1024)
    neighbour: Literal["zero-out", "remove"] = "zero-out"
    label: str | None = None
    template: str | dict[str, str] = "generic"
    seed: int = Field(default=0, ge=0, le=2**53 - 1)

    @model_validator(mode="after")
    def _one_of(self) -> DecodingConfig:
        if self.targets is None and self.temperature is None:
            self.targets = [1.0, 10.0]
        if self.targets is not None and self.temperature is not None:
            raise ValueError("targets: give targets (tau calibrated per target) or temperature, not both")
        if any(not (0 < t < math.inf) for t in (self.targets or [])):
            raise ValueError("targets: each must be > 0")
        if any(not (0 < d < 1) for d in self.deltas):
            raise ValueError("deltas: each must be in (0, 1)")
        return self


class ICLInfConfig(JSONBody):
    model_config = ConfigDict(extra="forbid")

    models: list[str] = Field(default_factory=list, max_length=8, description="empty: the default language model")
    dataset: DatasetRef = Field(default_factory=DatasetRef)
    classification: ClassificationConfig | None = Field(
        default=None, description="default: the classification defaults when decoding is not given either")
    decoding: DecodingConfig | None = None

    @model_validator(mode="after")
    def _something(self) -> ICLInfConfig:
        if self.classification is None and self.decoding is None:
            if "classification" in self.model_fields_set:
                raise ValueError("classification: give classification, decoding, or both")
            self.classification = ClassificationConfig()
        return self


@register
class ICLInfKind(JobKind):
    name = "iclinf"
    config_model = ICLInfConfig
    description = (
        "ICLInf (Wen et al.): per-exemplar leakage of in-context learning (label-only or full distribution, "
        "calibration, per-position losses, n_shots sweeps, several models), and the ICLInf audit of clip-softmax "
        "private decoding (epsilon_empirical vs epsilon_theoretical, Figure 6)."
    )

    def check(self, config: ICLInfConfig, settings) -> None:
        if config.decoding is not None:
            from app.audit.iclinf_decoding import GENERATION_TEMPLATES

            t = config.decoding.template
            if isinstance(t, str) and t not in GENERATION_TEMPLATES:
                raise JobConfigError(f"unknown generation template {t!r}; presets: {sorted(GENERATION_TEMPLATES)}",
                                     param="config.decoding.template")
            if isinstance(t, dict) and set(t) - {"instruction", "label_prefix", "text_prefix"}:
                raise JobConfigError("template fields are instruction, label_prefix, text_prefix",
                                     param="config.decoding.template")
        if config.classification is not None and config.classification.template is not None:
            from app.icl.templates import get_template

            try:
                get_template(config.classification.template)
            except (ValueError, TypeError) as exc:
                raise JobConfigError(str(exc), param="config.classification.template") from None

    def verdict(self, result: dict[str, Any], claimed_epsilon: float | None, claimed_delta: float | None) -> Verdict | None:
        cells = [c for m in result.get("models", []) for c in (m.get("decoding") or [])]
        if not cells:
            return None
        if any(c["epsilon_empirical"] > c["epsilon_theoretical"] * (1 + _TOL) + 1e-12 for c in cells):
            return "violation"
        return epsilon_verdict(result.get("epsilon"), result.get("delta"), claimed_epsilon, claimed_delta) or "pass"

    def run(self, ctx: JobContext, config: ICLInfConfig) -> dict[str, Any]:
        from app.audit import iclinf_plots as plots

        ctx.progress(0.0, "loading the dataset")
        data = _load_dataset(ctx, config)
        names = config.models or [None]
        cl = config.classification
        dc = config.decoding
        runs_per_model = (len(cl.n_shots) * len(cl.variants) * len(cl.calibrate) if cl else 0) + (
            (len(dc.targets or [None]) * len(dc.deltas)) if dc else 0)
        total = max(1, runs_per_model * len(names))
        done = [0]

        def sub(msg_prefix: str):
            def prog(f: float, msg: str) -> None:
                ctx.progress(min(0.99, (done[0] + f) / total), f"{msg_prefix}: {msg}")
            return prog

        models_out: list[dict[str, Any]] = []
        for name in names:
            ctx.progress(done[0] / total, f"loading model {name or 'default'}")
            lm = _get_model(ctx, name)
            entry: dict[str, Any] = {"model": lm.name}
            if cl is not None:
                entry["classification"] = _run_classification(lm, data, cl, sub, done)
            if dc is not None:
                entry["decoding"] = _run_decoding(lm, data, dc, sub, done)
            models_out.append(entry)

        result: dict[str, Any] = {
            "dataset": {k: v for k, v in data.items() if k in ("source", "name", "id", "labels", "train", "test")},
            "models": models_out,
            # as every copy of a config that leaves the server: inline texts (a template object, a label) summarised
            "config": public_config("iclinf", config.model_dump(mode="json"), ctx.settings),
        }
        cells = [c for m in models_out for c in (m.get("decoding") or [])]
        if cells:
            worst = max(cells, key=lambda c: c["epsilon_empirical"])
            result.update(epsilon=worst["epsilon_empirical"], delta=worst["delta"],
                          epsilon_theoretical=worst["epsilon_theoretical"])
        ctx.progress(0.99, "writing artifacts")
        ctx.add_artifact("config.json", "application/json", json.dumps(result["config"], indent=2).encode())
        runs = [(m["model"], r) for m in models_out for r in (m.get("classification") or [])]
        if runs:
            ctx.add_artifact("iclinf.csv", "text/csv", _csv(
                ["model", "variant", "calibrate", "n_shots", "m", "iclinf_mean", "iclinf_std", "accuracy",
                 "queries_per_second", "tokens_computed", "tokens_minimum", "tokens_naive"],
                [[mn, r["variant"], r["calibrate"], r["n_shots"], r["m"], r["iclinf_mean"], r["iclinf_std"],
                  r["accuracy"], r["queries_per_second"], r["counts"]["tokens_computed"],
                  r["counts"]["tokens_minimum"], r["counts"]["tokens_naive"]] for mn, r in runs]))
            ctx.add_artifact("per_position.csv", "text/csv", _csv(
                ["model", "variant", "calibrate", "n_shots", "position", "mean", "std"],
                [[mn, r["variant"], r["calibrate"], r["n_shots"], i + 1, mu, sd] for mn, r in runs
                 for i, (mu, sd) in enumerate(zip(r["per_position_mean"], r["per_position_std"]))]))
            try:
                series = {f"{mn} {r['variant']}{' cal' if r['calibrate'] else ''} n={r['n_shots']}": r["per_position_mean"]
                          for mn, r in runs}
                ctx.add_artifact("per_position.png", "image/png", plots.per_position_png(series))
                if len(cl.n_shots) > 1:
                    sweep: dict[str, tuple[list, list, list]] = {}
                    for mn, r in runs:
                        xs, ys, es = sweep.setdefault(f"{mn} {r['variant']}{' cal' if r['calibrate'] else ''}", ([], [], []))
                        xs.append(r["n_shots"])
                        ys.append(r["iclinf_mean"])
                        es.append(r["iclinf_std"] or 0.0)
                    ctx.add_artifact("n_shots.png", "image/png", plots.n_shots_png(sweep))
            except Exception as exc:  # noqa: BLE001 - a plot never fails the job; say why it is missing
                log.warning("iclinf job %s: no classification plot (%s)", ctx.job_id, exc)
                result.setdefault("warnings", []).append(f"no plot: {type(exc).__name__}: {exc}")
        if cells:
            cols = ["model", "target_epsilon", "delta", "temperature", "alpha", "epsilon_theoretical",
                    "epsilon_empirical", "ratio", "epsilon_empirical_x2", "rdp_theoretical", "rdp_empirical",
                    "tokens", "neighbour", "adjacency"]
            ctx.add_artifact("decoding.csv", "text/csv", _csv(
                cols, [[m["model"]] + [c[k] for k in cols[1:]] for m in models_out for c in (m.get("decoding") or [])]))
            try:
                ctx.add_artifact("epsilon.png", "image/png", plots.figure6_png(cells))
            except Exception as exc:  # noqa: BLE001 - as above
                log.warning("iclinf job %s: no decoding plot (%s)", ctx.job_id, exc)
                result.setdefault("warnings", []).append(f"no plot: {type(exc).__name__}: {exc}")
        ctx.progress(1.0, "done")
        return result


# ---------------------------------------------------------------------------
# Pieces
# ---------------------------------------------------------------------------


def _get_model(ctx: JobContext, name: str | None) -> Any:
    rt = ctx.runtime
    try:
        return rt.get_model(name, "lm")
    except KeyError:
        pass
    if name is None:
        raise JobConfigError("no language model is loaded on this worker", param="config.models")
    looks_like_source = name.startswith("bundled:") or "/" in name or name.endswith(".gguf")
    if not looks_like_source:
        raise JobConfigError(f"model {name!r} is not loaded here; loaded: {sorted(rt.models)}; or give a source "
                             "such as 'bundled:gemma3-270m' or a hub id", param="config.models")
    cache = rt.extras.setdefault("iclinf_models", {})
    if name not in cache:
        from app.llm import ModelSpec, load_model

        try:
            cache[name] = load_model(ModelSpec(name=name, kind="lm", source=name), cache_dir=rt.settings.model_cache_dir,
                                     device=rt.settings.device, dtype=rt.settings.dtype)
        except Exception as exc:  # noqa: BLE001 - any load failure is the user's config to fix
            raise JobError(f"model {name!r} could not be loaded: {type(exc).__name__}: {exc}",
                           param="config.models") from None
    return cache[name]


def _load_dataset(ctx: JobContext, config: ICLInfConfig) -> dict[str, Any]:
    """train/test pairs, labels and template. A registered set is split: m held-out queries, the rest the pool."""
    ref = config.dataset
    if ref.source == "bundled":
        from app.icl import bundled_names, load_bundled

        try:
            ds = load_bundled() if ref.name is None else load_bundled(ref.name)
        except ValueError as exc:
            raise JobConfigError(f"{exc}; bundled: {bundled_names()}", param="config.dataset.name") from None
        return {"source": "bundled", "name": ds.name, "train": len(ds.train),
                "test": len(ds.test), "labels": list(ds.labels), "train_pairs": ds.exemplars(),
                "test_pairs": ds.exemplars("test"), "template": ds.template, "all_pairs": ds.exemplars()}
    if ref.source == "hf":
        from app.icl import load_hf_task

        try:
            ds = load_hf_task(ref.name, limit=ref.limit, rng=np.random.default_rng(0))
        except ValueError as exc:
            raise JobConfigError(str(exc), param="config.dataset.name") from None
        except Exception as exc:  # noqa: BLE001 - no network, no datasets package...
            raise JobError(f"Hugging Face task {ref.name!r} is not reachable here: {type(exc).__name__}: {exc}",
                           param="config.dataset") from None
        return {"source": "hf", "name": ref.name, "train": len(ds.train), "test": len(ds.test),
                "labels": list(ds.labels), "train_pairs": ds.exemplars(), "test_pairs": ds.exemplars("test"),
                "template": ds.template, "all_pairs": ds.exemplars()}
    # A registered exemplar set, visible only to the job's own tenant (404-like otherwise).
    from app.icl.templates import get_template
    from app.jobs import repository as jobs_repo
    from app.store import datasets_repo

    with ctx.runtime.db.session() as s:
        job = jobs_repo.get_job(s, ctx.job_id, tenant_id=None)
        tenant = job.tenant_id if job is not None else None
        ds = datasets_repo.get_dataset(s, ref.id, tenant) if tenant is not None else None
        if ds is None:
            raise JobConfigError(f"dataset {ref.id!r} not found", param="config.dataset.id")
        pairs = datasets_repo.load_exemplars(s, ref.id)
        labels = list(ds.labels or [])
        tpl_fields = {k: v for k, v in dict(ds.template or {}).items() if k in ("instruction", "input_prefix", "output_prefix")}
        task = ds.task
    if task != "classification" and config.classification is not None:
        raise JobConfigError(f"dataset {ref.id!r} is a {task} set; classification ICLInf needs labels",
                             param="config.dataset.id")
    cl = config.classification
    m = cl.m if cl is not None else 0
    perm = np.random.default_rng([cl.seed if cl else 0, 2]).permutation(len(pairs))
    test = [pairs[i] for i in perm[:m]]
    train = [pairs[i] for i in perm[m:]]
    if cl is not None and len(train) < max(cl.n_shots):
        raise JobConfigError(f"dataset {ref.id!r} has {len(pairs)} exemplars: too few for m = {m} held-out "
                             f"queries and n_shots = {max(cl.n_shots)}", param="config.classification.m")
    return {"source": "registered", "id": ref.id, "train": len(train), "test": len(test), "labels": labels,
            "train_pairs": train, "test_pairs": test, "template": get_template(tpl_fields) if tpl_fields else None,
            "all_pairs": pairs}


def _run_classification(lm: Any, data: dict[str, Any], cl: ClassificationConfig, sub, done: list[int]) -> list[dict]:
    from app.audit.iclinf import iclinf_sweep
    from app.icl.templates import get_template

    tpl = get_template(cl.template) if cl.template is not None else data["template"]
    if cl.m > len(data["test_pairs"]):
        raise JobConfigError(f"m = {cl.m} is more than the {len(data['test_pairs'])} test queries",
                             param="config.classification.m")
    if max(cl.n_shots) > len(data["train_pairs"]):
        raise JobConfigError(f"n_shots = {max(cl.n_shots)} is more than the pool of {len(data['train_pairs'])}",
                             param="config.classification.n_shots")
    out = []
    for variant in cl.variants:
        for calibrate in cl.calibrate:
            tag = f"{lm.name} {variant}{' calibrated' if calibrate else ''}"
            prog = sub(tag)
            base = done[0]

            def p(f: float, msg: str, base: int = base, prog=prog) -> None:
                done[0] = base
                prog(f * len(cl.n_shots), msg)

            res = iclinf_sweep(lm, data["train_pairs"], data["test_pairs"], data["labels"], tpl,
                               n_shots=cl.n_shots, m=cl.m, variant=variant, calibrate=calibrate, seed=cl.seed,
                               progress=p)
            done[0] = base + len(cl.n_shots)
            out.extend(r.to_dict() for r in res)
    return out


def _run_decoding(lm: Any, data: dict[str, Any], dc: DecodingConfig, sub, done: list[int]) -> list[dict]:
    from app.audit.iclinf_decoding import (
        GENERATION_TEMPLATES,
        GenerationTemplate,
        audit_decoding,
        generation_batches,
        most_frequent_label,
    )

    tpl = GENERATION_TEMPLATES[dc.template] if isinstance(dc.template, str) else GenerationTemplate(
        instruction=dc.template.get("instruction", GENERATION_TEMPLATES["generic"].instruction),
        label_prefix=dc.template.get("label_prefix", "Label: "), text_prefix=dc.template.get("text_prefix", "Text: "))
    pairs = data["train_pairs"] if data["source"] != "registered" else data["all_pairs"]
    if not pairs:
        raise JobConfigError("the dataset has no exemplars", param="config.dataset")
    label = dc.label if dc.label is not None else most_frequent_label(pairs)
    fields, ref = _label_ref(label, pairs, data["labels"], given=dc.label is not None)
    try:
        batches, _, label = generation_batches(pairs, batch_size=dc.batch_size, sequences=dc.sequences,
                                               label=label, template=tpl,
                                               rng=np.random.default_rng([dc.seed, 3]))
    except ValueError as exc:
        raise JobConfigError(f"{ref}: {exc}", param="config.decoding.batch_size") from None
    cells = [(t, d) for d in dc.deltas for t in (dc.targets or [None])]
    out = []
    for k, (target, delta) in enumerate(cells):
        base = done[0]
        prog = sub(f"{lm.name} decoding audit, target {target if target is not None else '-'}, delta {delta:g}")

        def p(f: float, msg: str, base: int = base, prog=prog) -> None:
            done[0] = base
            prog(f, msg)

        res = audit_decoding(lm, batches, clip=dc.clip, delta=delta, max_tokens=dc.max_tokens, target_epsilon=target,
                             temperature=dc.temperature, neighbour=dc.neighbour,
                             rng=np.random.default_rng([dc.seed, 4, k]), progress=p)
        done[0] = base + 1
        d = res.to_dict()
        d.update(fields)
        out.append(d)
    return out


def _label_ref(label: str, pairs: list[tuple[str, str]], declared: list[str], *, given: bool) -> tuple[dict, str]:
    """How the result and messages name the decoding label. A declared class label is metadata: by its
    text. Anything else is an exemplar output (a generation set's private text): by the index of the
    first exemplar that carries it and their count, never by text (docs/security.md)."""
    if label in declared:
        return {"label": label}, f"label {label!r}"
    idx = [i for i, (_, y) in enumerate(pairs) if y == label]
    if not idx:
        return {"label_exemplar": None, "label_exemplars": 0}, "config.decoding.label" if given else "the label"
    return {"label_exemplar": idx[0], "label_exemplars": len(idx)}, f"the output of exemplar {idx[0]}"


def _csv(header: list[str], rows: list[list[Any]]) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    for row in rows:
        w.writerow(["" if x is None or (isinstance(x, float) and not math.isfinite(x)) else x for x in row])
    return buf.getvalue().encode()
