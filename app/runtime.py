"""The process-wide state of a running dpicl: settings, database, loaded models.

One ``Runtime`` per server or worker process. Models load once, in this process
(never in a forked child, so CUDA stays usable), before traffic is accepted.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from app import __version__
from app.budget.combiner import ChargeCombiner
from app.config import Settings
from app.cpu_gate import CpuGate
from app.store import Database
from app.store import migrate as migrations

log = logging.getLogger("dpicl.runtime")


@dataclass
class Runtime:
    settings: Settings
    db: Database
    models: dict[str, Any] = field(default_factory=dict)
    model_errors: dict[str, str] = field(default_factory=dict)
    ready: bool = False
    started_at: float = field(default_factory=time.time)
    version: str = __version__
    extras: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    planner_gate: CpuGate = field(init=False, repr=False)
    charges: ChargeCombiner = field(init=False, repr=False)  # the answers' charges, group-committed per account

    def __post_init__(self) -> None:
        self.planner_gate = CpuGate("audit planner", self.settings.plan_concurrency, self.settings.plan_queue)
        self.charges = ChargeCombiner(lambda: self.db.write_session())

    @classmethod
    def create(cls, settings: Settings, *, models: dict[str, Any] | None = None) -> "Runtime":
        if settings.migrate_on_startup:
            _ensure_sqlite_dir(settings.database_url)
            migrations.upgrade(settings.database_url)
        rt = cls(settings=settings, db=Database(settings.database_url))
        if models is not None:
            rt.models.update(models)
        return rt

    def load_models(self) -> None:
        """Load every configured model that is not loaded yet. Raises on the first failure."""
        if not self.settings.load_models:
            return
        from app.llm import ModelSpec, load_model

        for mc in self.settings.models:
            if mc.name in self.models:
                continue
            t0 = time.perf_counter()
            spec = ModelSpec(name=mc.name, kind=mc.kind, source=mc.source, backend=mc.backend, options=dict(mc.options))
            try:
                self.models[mc.name] = load_model(
                    spec, cache_dir=self.settings.model_cache_dir, device=self.settings.device, dtype=self.settings.dtype
                )
            except Exception as exc:  # reported by /v1/health and the start-up error
                self.model_errors[mc.name] = f"{type(exc).__name__}: {exc}"
                raise
            log.info("model %s loaded in %.2f s", mc.name, time.perf_counter() - t0)

    def get_model(self, name: str | None, kind: str = "lm") -> Any:
        if name is None:
            name = self.settings.default_lm if kind == "lm" else next(
                (m.name for m in self.settings.models if m.kind == kind), None
            )
        model = self.models.get(name) if name else None
        if model is None or model.spec.kind != kind:
            raise KeyError(name)
        return model

    def database_status(self) -> dict[str, Any]:
        try:
            self.db.ping()
            rev = migrations.current_revision(self.settings.database_url)
            head = migrations.head_revision()
            return {"ok": rev == head, "dialect": self.db.dialect, "revision": rev, "head": head}
        except Exception as exc:
            return {"ok": False, "dialect": self.db.dialect, "error": f"{type(exc).__name__}: {exc}"}

    def close(self) -> None:
        self.db.dispose()


def _ensure_sqlite_dir(url: str) -> None:
    from pathlib import Path

    from sqlalchemy.engine import make_url

    u = make_url(url)
    if u.drivername.startswith("sqlite") and u.database and u.database != ":memory:":
        Path(u.database).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
