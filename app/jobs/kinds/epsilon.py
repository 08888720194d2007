"""``epsilon``: the privacy math of ``POST /v1/privacy/*`` run as an audit job.

The config is the JSON body of ``POST /v1/privacy/calibrate``; an optional
``operation`` field selects ``convert`` (body of ``/v1/privacy/convert``) or
``empirical`` (body of ``/v1/privacy/empirical``) instead. The result is that
endpoint's answer; the verdict compares its ``epsilon`` (and ``delta``) with the
claim. Artifacts: ``result.csv`` (the scalar fields) and, where the operation
has a curve, ``epsilon.png`` with its data in ``sweep.csv``.
"""

from __future__ import annotations

import csv
import io
import logging
import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field, RootModel

# The request models of the privacy endpoints are the config schema, so that the
# config is byte-for-byte the endpoint's body. (They live in the API layer today;
# if they move to app.privacy, only this import changes.)
from app.privacy.schemas import CalibrateRequest, ConvertRequest, EmpiricalRequest
from app.jobs.context import JobContext
from app.jobs.errors import JobCancelled, JobConfigError, JobLost, JobShutdown
from app.jobs.registry import JobKind, register
from app.privacy import service as privacy
from app.privacy.solve import checkpoints

log = logging.getLogger("dpicl.jobs.epsilon")


class EpsilonCalibrate(CalibrateRequest):
    operation: Literal["calibrate"] = "calibrate"


class EpsilonConvert(ConvertRequest):
    operation: Literal["convert"]


class EpsilonEmpirical(EmpiricalRequest):
    operation: Literal["empirical"]


_BY_OPERATION: dict[str, type[BaseModel]] = {
    "calibrate": EpsilonCalibrate,
    "convert": EpsilonConvert,
    "empirical": EpsilonEmpirical,
}


class EpsilonConfig(RootModel[EpsilonCalibrate | EpsilonConvert | EpsilonEmpirical]):
    """One of the three bodies; ``operation`` (default ``calibrate``) says which.

    Validation dispatches on ``operation`` first, so that errors name the field of
    the selected body (``config.target_epsilon``), not a union branch."""

    root: EpsilonCalibrate | EpsilonConvert | EpsilonEmpirical = Field(union_mode="left_to_right")

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> EpsilonConfig:  # type: ignore[override]
        if isinstance(obj, cls):
            return obj
        if isinstance(obj, BaseModel):
            obj = obj.model_dump()
        if not isinstance(obj, dict):
            raise JobConfigError("must be a JSON object", param="config")
        op = obj.get("operation", "calibrate")
        model = _BY_OPERATION.get(op) if isinstance(op, str) else None
        if model is None:
            raise JobConfigError(
                f"unknown operation {op!r}; use one of {', '.join(_BY_OPERATION)}", param="config.operation"
            )
        return cls(root=model.model_validate(obj, *args, **kwargs))

    def model_dump(self, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        return self.root.model_dump(*args, **kwargs)


@register
class EpsilonKind(JobKind):
    name = "epsilon"
    config_model = EpsilonConfig
    description = (
        "Privacy math as a job: the body of POST /v1/privacy/calibrate (default), or with "
        "operation 'convert' / 'empirical' the body of that endpoint. Verdict: the result's epsilon "
        "(and delta) against the claim."
    )

    def check(self, config: EpsilonConfig, settings) -> None:
        # The structural rules of the privacy service (the oneOf variants its JSON Schema states), so that a
        # client learns of them at submit time; the math's own limits are checked when the job runs and
        # reported as the job's error.
        from app.privacy.errors import PrivacyInputError
        from app.privacy.schemas import check_variants

        try:
            check_variants(config.root)
        except PrivacyInputError as exc:
            raise JobConfigError(exc.message, param=f"config.{exc.param}" if exc.param else "config") from None

    def run(self, ctx: JobContext, config: EpsilonConfig) -> dict[str, Any]:
        c = config.root
        op = c.operation
        args = c.model_dump(exclude={"operation"})
        ctx.progress(0.05, f"{op}: computing")
        fn = {"calibrate": privacy.calibrate, "convert": privacy.convert, "empirical": privacy.empirical}[op]
        # Every solver step is a progress point: a cancel or a shutdown stops the math within one step.
        with checkpoints(ctx.checkpoint):
            result = dict(fn(**args))
        result["operation"] = op
        ctx.progress(0.5, f"{op}: writing artifacts")
        ctx.add_artifact("result.csv", "text/csv", _scalars_csv(result))
        try:
            with checkpoints(ctx.checkpoint):
                sweep = _sweep(op, args, result, ctx.checkpoint)
        except (JobCancelled, JobShutdown, JobLost):
            raise
        except Exception as exc:  # a plot never fails the job; say why it is missing
            log.warning("epsilon job %s: no plot (%s)", ctx.job_id, exc)
            result.setdefault("warnings", []).append(f"no plot: {type(exc).__name__}: {exc}")
            sweep = None
        if sweep is not None:
            ctx.progress(0.7, f"{op}: plotting")
            xs, ys, meta = sweep
            ctx.add_artifact("sweep.csv", "text/csv", _columns_csv({meta["xlabel"]: xs, meta["ylabel"]: ys}))
            from app.jobs.plots import line_plot_png

            try:  # drawing too: a claim of 1e-320 as the line made matplotlib's tick labels fail (the job crashed)
                png = line_plot_png(xs, ys, xlabel=meta["xlabel"], ylabel=meta["ylabel"], title=meta["title"],
                                    hline=meta.get("hline"), marker=meta.get("marker"),
                                    logx=meta.get("logx", False))
            except Exception as exc:
                log.warning("epsilon job %s: no plot (%s)", ctx.job_id, type(exc).__name__)
                result.setdefault("warnings", []).append(f"no plot: {type(exc).__name__}")
            else:
                ctx.add_artifact("epsilon.png", "image/png", png)
        ctx.progress(1.0, f"{op}: done")
        return result


def _sweep(op: str, args: dict[str, Any], result: dict[str, Any], checkpoint: Callable[[], None] = lambda: None):
    """The curve around the answer: epsilon against the solved parameter (calibrate) or against delta (convert)."""
    if op == "calibrate":
        param = result["solve_for"].replace("-", "_")
        x0 = float(result[param])
        if param == "batch_size":
            xs = sorted({max(1, int(round(x0 * f))) for f in np.geomspace(0.25, 4, 25)})
        else:
            xs = list(np.geomspace(x0 / 4, x0 * 4, 41))
        ys = []
        for x in xs:
            checkpoint()
            if result["mechanism"] == "gaussian":
                r = privacy.convert(sigma=float(x), sensitivity=result["sensitivity"], count=result["compositions"],
                                    delta=result["delta"])
            else:
                # rho of clip-softmax scales with (clip / (batch_size * temperature))^2 (ICLInf Alg. 1).
                scale = (float(x) / x0) ** 2 if param == "clip" else (x0 / float(x)) ** 2
                r = privacy.convert(rho=result["rho"] * scale, delta=result["delta"], orders=args.get("orders"),
                                    conversion=args.get("conversion", "best"))
            ys.append(r["epsilon"])
        return [float(x) for x in xs], ys, {
            "xlabel": param, "ylabel": "epsilon", "logx": True,
            "title": f"{result['mechanism']}: epsilon at delta={result['delta']:g}",
            "hline": (result["target_epsilon"], "target epsilon"),
            "marker": (x0, result["epsilon"], f"calibrated {param}"),
        }
    if op == "convert" and result.get("source") not in (None, "approx-dp") and result.get("epsilon") is not None:
        base = {k: v for k, v in args.items() if k not in ("delta", "epsilon", "to")}
        if args.get("delta") is not None:  # epsilon as a function of delta
            xs = list(np.geomspace(1e-12, 1e-1, 23))
            ys = [checkpoint() or privacy.convert(**base, delta=float(d))["epsilon"] for d in xs]
            return [float(x) for x in xs], ys, {
                "xlabel": "delta", "ylabel": "epsilon", "logx": True,
                "title": f"{result['source']} x{result['count']}: epsilon against delta",
                "marker": (result["delta"], result["epsilon"], "requested delta"),
            }
        e0 = float(result["epsilon"])
        xs = list(np.linspace(max(e0 / 4, 1e-3), max(e0 * 4, 1.0), 31))
        ys = [checkpoint() or privacy.convert(**base, epsilon=float(e))["delta"] for e in xs]
        return [float(x) for x in xs], ys, {
            "xlabel": "epsilon", "ylabel": "delta",
            "title": f"{result['source']} x{result['count']}: delta against epsilon",
            "marker": (e0, result["delta"], "requested epsilon"),
        }
    return None


def _scalars_csv(result: dict[str, Any]) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["field", "value"])
    for k, v in result.items():
        if v is None or isinstance(v, (str, int, float, bool)):
            w.writerow([k, "" if v is None else v])
    return buf.getvalue().encode()


def _columns_csv(cols: dict[str, list]) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(list(cols))
    for row in zip(*cols.values()):
        w.writerow(["" if (x is None or (isinstance(x, float) and not math.isfinite(x))) else repr(float(x))
                    for x in row])
    return buf.getvalue().encode()
