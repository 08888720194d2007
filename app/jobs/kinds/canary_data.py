"""``canary_mia``'s datasets: the audited context drawn from the config's exemplars or a bundled set,
the canary's default label, the served model a target names, and rows as CSV."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

import numpy as np

from app.jobs.context import JobContext
from app.jobs.errors import JobConfigError, JobError
from app.jobs.kinds.canary_config import CanaryMIAConfig, DatasetConfig


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


def _with_decoys(labels: list[str], dataset: Any) -> list[str]:
    """The task labels and ``dataset.decoy_labels``' decoys (``queries.with_decoys``); a decoy name equal to
    a task label (a bundled task's, known only here) is a 422 naming the field."""
    from app.audit.queries import with_decoys

    try:
        return with_decoys(labels, dataset.decoy_labels)
    except ValueError as exc:
        raise JobConfigError(str(exc), param="config.dataset.decoy_labels") from None


def _query_labels(config: CanaryMIAConfig) -> int:
    """How many labels the attack query votes over (task labels plus the strategy's literals and the
    canary's label), as ``run`` resolves it; no model is needed."""
    from app.audit.canaries import Canary
    from app.audit.queries import resolve_query

    ex, labels, _, template = _dataset(config.dataset)
    canary = Canary(config.canary.type, "0" * 16, config.canary.label or labels[0])
    query_labels = _with_decoys(labels, config.dataset)
    try:
        return len(resolve_query(config.query or "inquiry", canary, query_labels, ex[:config.dataset.size],
                                 template).labels)
    except (ValueError, TypeError) as exc:
        raise JobConfigError(str(exc), param="config.query") from None


def _pick(rng: np.random.Generator, exemplars: list[tuple[str, str]], size: int) -> list[tuple[str, str]]:
    """``size`` exemplars drawn without replacement (the audited context), in dataset order."""
    pick = rng.choice(len(exemplars), size=size, replace=False)
    return [exemplars[int(i)] for i in sorted(pick)]


def pick_context(rng: np.random.Generator, exemplars: list[tuple[str, str]], config: Any,
                 labels: list[str]) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """The audited context (``dataset.size`` exemplars of the pool) by ``dataset.pick``, and what was done.

    one_label: ``size`` exemplars of the pool's most common task label other than the canary's (its
    configured label), drawn without replacement. Every partition without the canary then sees one
    label, so an ideal copier's partitions vote alike, [1, T - 1] with the canary and [0, T] without:
    the vote model (tight-auditing Lemma 3.1, b = 1) a black-box audit's power assumes. With a random
    draw from a pool of several labels the partitions' votes split, and a design planned for
    P(detect sigma/4) >= 0.9 passed a sigma/4 gateway in 15 of 20 audits (the README's CI audit, 5
    bundled labels; benchmarks/bench_default_decoy.py). 'auto' takes one_label for a black-box audit of
    rnm (``CanaryMIAConfig.black_box_rnm``) when one label has ``size`` exemplars, else random."""
    size = config.dataset.size
    if config.requested_pick() == "one_label":
        counts = {lab: 0 for lab in labels if lab != config.canary.label}
        for _, lab in exemplars:
            if lab in counts:
                counts[lab] += 1
        best = max(counts, key=lambda lab: (counts[lab], -labels.index(lab)), default=None)
        if best is not None and counts[best] >= size:
            rows = [i for i, (_, lab) in enumerate(exemplars) if lab == best]
            pick = rng.choice(len(rows), size=size, replace=False)
            return [exemplars[rows[int(i)]] for i in sorted(pick)], {"pick": "one_label", "label": best}
        if config.dataset.pick == "one_label":
            raise JobConfigError(f"pick one_label: no label other than the canary's has {size} exemplars in the "
                                 f"pool (most: {counts.get(best, 0) if best is not None else 0})",
                                 param="config.dataset.pick")
        return _pick(rng, exemplars, size), {
            "pick": "random", "note": f"no label has {size} exemplars for a one-label context: drawn at random; "
            "partitions' votes may split, and the black-box power assumes they do not"}
    return _pick(rng, exemplars, size), {"pick": "random"}


def context_notes(config: Any, labels: int) -> list[str]:
    """The plan's notes on what the defaults put into a black-box context (decoys, a one-label draw)."""
    out = []
    decoys = config.dataset.decoy_count()
    if decoys:
        out.append(f"the {labels} labels include {decoys} decoy label(s) that no exemplar carries "
                   "(dataset.decoy_labels): winner-only noise never releases one, the claimed noise does at least "
                   "at the release floor (docs/audit.md#decoy-labels)")
    if config.requested_pick() == "one_label":
        out.append("the context is drawn from one label of the pool (dataset.pick; random where no label has "
                   "dataset.size exemplars): the partitions without the canary then vote alike, as this plan's "
                   "vote model assumes (docs/audit.md#black-box-defaults)")
    return out


def _rarest_label(labels: list[str], exemplars: list[tuple[str, str]]) -> str:
    counts = {lab: 0 for lab in labels}
    for _, lab in exemplars:
        if lab in counts:
            counts[lab] += 1
    return min(labels, key=lambda lab: (counts[lab], labels.index(lab)))


def _served(ctx: JobContext, name: str | None, kind: str, param: str):
    try:
        return ctx.runtime.get_model(name, kind)
    except KeyError:
        what = "model" if kind == "lm" else kind
        raise JobError(f"{what} {name!r} is not served by this worker", code="invalid_config", param=param) from None


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
