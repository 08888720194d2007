"""The registry of job kinds.

A kind is a small object with a name, a pydantic config schema, ``run`` and
``verdict``. Kinds live in the modules ``app.jobs.kinds.KIND_MODULES`` names
(imported on first use; each calls :func:`register`) or register themselves
from anywhere with :func:`register`. Test-only kinds are offered only when
``settings.job_test_kinds`` is on.
"""

from __future__ import annotations

import importlib
import logging
import math
import threading
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel

if TYPE_CHECKING:
    from app.config import Settings
    from app.jobs.context import JobContext

log = logging.getLogger("dpicl.jobs")

# pass: no violation seen by an audit that had the power to see one; violation: the measurement
# refutes the claim; inconclusive: no violation seen, but the audit could not have seen one
# (the reason is in result["verdict_reason"]).
Verdict = Literal["pass", "violation", "inconclusive"]

# Relative slack when comparing a measured epsilon with a claim: floating-point
# noise in a conversion must not turn an exact claim into a violation.
_REL_TOL = 1e-9


class JobKind:
    """Base class of job kinds. Subclasses set ``name`` and ``config_model`` and implement ``run``."""

    name: ClassVar[str]
    config_model: ClassVar[type[BaseModel]]
    description: ClassVar[str] = ""
    test_only: ClassVar[bool] = False
    # A kind that charges a dataset's privacy budget (synthesize): submitting it needs the scope that
    # may spend budget (infer or admin), not only `audit`.
    spends_budget: ClassVar[bool] = False

    def check(self, config: BaseModel, settings: Settings) -> None:
        """Checks beyond the schema, before anything is queued; raise JobConfigError(param=...)."""

    def admit(self, runtime: Any, tenant_id: str, config: BaseModel) -> None:
        """Checks that read the submitting tenant's data (e.g. a dataset's budget), before anything is
        queued; raise JobConfigError (422) or JobBudgetError (429) naming the field. Default: none."""

    def run(self, ctx: JobContext, config: BaseModel) -> dict[str, Any]:
        raise NotImplementedError

    def verdict(self, result: dict[str, Any], claimed_epsilon: float | None, claimed_delta: float | None) -> Verdict | None:
        """Default: compare ``result["epsilon"]`` (and ``result["delta"]``) with the claim."""
        return epsilon_verdict(result.get("epsilon"), result.get("delta"), claimed_epsilon, claimed_delta)


def epsilon_verdict(
    epsilon: Any, delta: Any, claimed_epsilon: float | None, claimed_delta: float | None
) -> Verdict | None:
    """``violation`` when the measured epsilon (or delta) exceeds the claim; None without a claim or a measurement."""
    if claimed_epsilon is None or epsilon is None:
        return None
    eps = float(epsilon)
    if math.isnan(eps):
        return None
    if eps > claimed_epsilon * (1 + _REL_TOL) + 1e-12:
        return "violation"
    if claimed_delta is not None and delta is not None and float(delta) > claimed_delta * (1 + _REL_TOL) + 1e-300:
        return "violation"
    return "pass"


_KINDS: dict[str, JobKind] = {}
_lock = threading.RLock()
_discovered = False


def register(kind: JobKind | type[JobKind]) -> JobKind | type[JobKind]:
    """Register a kind (an instance or a class with a no-argument constructor); usable as a decorator."""
    inst = kind() if isinstance(kind, type) else kind
    if not getattr(inst, "name", None) or not isinstance(getattr(inst, "config_model", None), type):
        raise TypeError(f"{kind!r} must set name and config_model")
    with _lock:
        _KINDS[inst.name] = inst
    return kind


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    with _lock:
        if _discovered:
            return
        import app.jobs.kinds as pkg

        for name in pkg.KIND_MODULES:
            importlib.import_module(f"{pkg.__name__}.{name}")
        _discovered = True


def all_kinds() -> dict[str, JobKind]:
    _discover()
    return dict(_KINDS)


def available_kinds(settings: Settings) -> dict[str, JobKind]:
    return {n: k for n, k in sorted(all_kinds().items()) if settings.job_test_kinds or not k.test_only}


def get_kind(name: str, settings: Settings) -> JobKind | None:
    return available_kinds(settings).get(name)
