"""``sleep``: a test-only kind (``DPICL_JOB_TEST_KINDS=true``) that exercises the machinery:
progress steps, cancellation, crash recovery, failures, artifacts and verdicts."""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.jobs.context import JobContext
from app.jobs.errors import JobError
from app.jobs.registry import JobKind, register
from app.llm.tenancy import current_tenant


class SleepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    steps: int = Field(default=5, ge=0, le=100_000)
    step_seconds: float = Field(default=0.1, ge=0, le=60)
    # Reported as the measured epsilon (so a claim can pass or fail on purpose).
    epsilon: float = Field(default=0.5, ge=0)
    delta: float | None = Field(default=None, ge=0, lt=1)
    fail_at_step: int | None = Field(default=None, ge=0)
    fail_message: str = "the sleep job failed on purpose"
    artifacts: bool = False
    # Spin the CPU (holding the GIL) instead of sleeping: the worst case for the server's event loop.
    busy: bool = False
    # With busy: spin in numpy matrix products instead (BLAS releases the GIL: the server's threads run beside it).
    busy_numpy: bool = False


@register
class SleepKind(JobKind):
    name = "sleep"
    config_model = SleepConfig
    description = "Test-only: sleeps in steps, reporting progress; can fail or make artifacts on request."
    test_only = True

    def run(self, ctx: JobContext, config: SleepConfig) -> dict[str, Any]:
        for i in range(config.steps):
            if config.fail_at_step is not None and i == config.fail_at_step:
                raise JobError(config.fail_message)
            if config.busy and config.busy_numpy:
                _spin_numpy(config.step_seconds)
            elif config.busy:
                end = time.perf_counter() + config.step_seconds
                while time.perf_counter() < end:
                    pass
            else:
                time.sleep(config.step_seconds)
            ctx.progress((i + 1) / config.steps, f"step {i + 1} of {config.steps}")
        if config.fail_at_step is not None and config.fail_at_step >= config.steps:
            raise JobError(config.fail_message)
        if config.artifacts:
            ctx.add_artifact("steps.csv", "text/csv", _csv(config.steps))
            ctx.add_artifact("plot.png", "image/png", _png(config.steps))
        # model_tenant: the tenant whose scope this job's model work would run in (tests/jobs/test_job_tenant.py)
        return {"steps": config.steps, "epsilon": config.epsilon, "delta": config.delta, "attempt": ctx.attempt,
                "model_tenant": current_tenant()}


def _spin_numpy(seconds: float) -> None:
    import numpy as np

    a = np.random.default_rng(0).random((192, 192))
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a = np.tanh(a @ a)


def _csv(n: int) -> bytes:
    return ("step,fraction\n" + "".join(f"{i + 1},{(i + 1) / n:.6f}\n" for i in range(n))).encode()


def _png(n: int) -> bytes:
    from app.jobs.plots import line_plot_png

    xs = list(range(1, n + 1))
    return line_plot_png(xs, [x / max(n, 1) for x in xs], xlabel="step", ylabel="progress", title="sleep job")
