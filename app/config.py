"""Service settings (pydantic-settings, prefix ``DPICL_``).

Everything the service reads from its environment is declared here, validated at
start-up, and reported by name when invalid (``dpicl serve`` exits with the
offending setting in its one-line error).
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, IPvAnyNetwork, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class ModelConfig(BaseModel):
    """One configured model: what ``app.llm.ModelSpec`` is built from."""

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:/-]+$")
    kind: Literal["lm", "embedder"] = "lm"
    # "bundled:<name>", a local folder, or a hub id (deployments with a hub only)
    source: str = Field(min_length=1)
    backend: Literal["hf", "remote"] = "hf"
    options: dict = Field(default_factory=dict)


def default_models() -> list[ModelConfig]:
    return [
        ModelConfig(name="smollm2-135m-instruct", kind="lm", source="bundled:smollm2-135m-instruct"),
        ModelConfig(name="all-minilm-l6-v2", kind="embedder", source="bundled:all-minilm-l6-v2"),
    ]


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask: a container's or taskset's limit), else all."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def auto_job_concurrency(cores: int | None = None) -> int:
    """Jobs at a time when ``DPICL_JOB_CONCURRENCY`` is ``auto`` (the default): the usable cores, at least 2,
    at most 4. At least 2: a short audit never waits for a slot behind one long job (issue 28: a CI audit
    waited 138 s behind a synthesis). At most 4: each model has one batch worker that every job shares
    (round robin, app/llm/scheduler.py), so more jobs than that do not add model throughput on a CPU; they
    add memory (each job's decode caches) and contention with live answers. The number of models does not
    enter: one model or several, a job whose target is remote (a gateway audit) waits on the network,
    not on a local model, and a job on a local model gets its fair turn of that model's batches."""
    return max(2, min(4, usable_cores() if cores is None else cores))


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dpicl" / "models"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DPICL_", env_file=None, extra="ignore")

    database_url: str = "sqlite:///./dpicl.db"
    # Run Alembic migrations when the server starts (on by default for the
    # embedded SQLite; deployments usually run `dpicl migrate` as a step).
    migrate_on_startup: bool = True

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    log_level: Literal["debug", "info", "warning", "error", "critical"] = "info"

    models: list[ModelConfig] = Field(default_factory=default_models)
    default_model: str | None = None
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    model_cache_dir: Path = Field(default_factory=_default_cache_dir)
    load_models: bool = True
    # Model work of one private answer must finish within this many seconds: a request still waiting
    # in a model's batch queue at its deadline is answered 503 (deadline_exceeded), uncharged.
    request_deadline_seconds: float = Field(default=120.0, gt=0)
    # Tokens one private answer may run through an in-process model (prompt rows as submitted, one per row
    # per decode step): the caller picks the query, partitions and shots, so this bounds the model time one
    # request can take (docs/security.md, "Input limits"); a request over it is a 422 request_too_large before
    # the call that would pass it, uncharged. None: twice the model's max_batch_tokens (16384 on a CPU, from
    # the device's memory on CUDA); 0: no bound. An rnm 8 x 4 answer of the bundled task is ~900.
    max_answer_tokens: int | None = Field(default=None, ge=0)

    # Limits on private exemplar sets (issue 3).
    max_exemplars: int = Field(default=10_000, ge=1)
    max_exemplar_chars: int = Field(default=4_000, ge=1)
    # Request bodies (app/api/body_limit.py; docs/security.md, "Input limits"): a body over its limit is a
    # 413, refused before it is read (Content-Length) or as soon as a chunked body passes it. Uploads
    # (POST /v1/datasets, POST /v1/audits) get the larger limit; every other route the small one.
    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    max_upload_bytes: int = Field(default=128 << 20, ge=1024)
    # The audit planner (POST /v1/audits/plan, and POST /v1/audits with trials "auto") is seconds of CPU
    # per request: at most this many run at once, this many more wait, the rest get 503 + Retry-After
    # (app/cpu_gate.py), so that a burst of plans cannot hold every worker thread.
    plan_concurrency: int = Field(default=2, ge=1, le=256)
    plan_queue: int = Field(default=8, ge=0, le=1024)
    # Accept caller-supplied noise seeds (tests and audits only; never in production).
    allow_seeded_noise: bool = False

    # API keys: "auto" runs open until the first key is created, then requires keys for good
    # (revoking every key does not reopen it; only "open" does). app/api/principal.py.
    auth_mode: Literal["auto", "required", "open"] = "auto"
    # Default privacy budget of a new dataset (per dataset, composed across answers).
    default_budget_epsilon: float = Field(default=8.0, gt=0)
    default_budget_delta: float = Field(default=1e-5, gt=0, lt=1)
    default_adjacency: Literal["replace-one", "add-remove"] = "replace-one"
    # Serve the non-private `icl` baseline on private sets (benchmarks only; its answers carry no guarantee).
    allow_nonprivate_baselines: bool = False

    # Background jobs
    job_runner: Literal["auto", "inprocess", "procrastinate", "none"] = "auto"
    job_heartbeat_seconds: float = Field(default=5.0, gt=0)
    # SIGTERM: stop accepting, wait at most this long for requests in flight, then cancel them (uvicorn's
    # timeout_graceful_shutdown); the process exits even if a worker thread is still busy.
    shutdown_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    job_stall_seconds: float = Field(default=60.0, gt=0)
    job_max_attempts: int = Field(default=3, ge=1)
    # Admission control: a tenant with this many queued jobs gets 429 + Retry-After on a new submission
    # (a burst of audits must not grow the queue without bound; docs/soak.md).
    job_max_queued_per_tenant: int = Field(default=1000, ge=1)
    artifacts_dir: Path = Path("./var/artifacts")

    # Audit jobs (issue 4): execution, webhooks, the test-only kinds.
    # Jobs at a time per server (in-process runner) or per `dpicl worker`: "auto" (the default) is 2 to 4 from
    # the usable cores (auto_job_concurrency); an explicit 1 runs jobs one at a time.
    job_concurrency: int = Field(default_factory=auto_job_concurrency, ge=1, le=64)
    job_poll_seconds: float = Field(default=1.0, gt=0)
    job_test_kinds: bool = False
    webhook_secret: str | None = Field(default=None, min_length=16)
    webhook_timeout_seconds: float = Field(default=10.0, gt=0)
    webhook_max_attempts: int = Field(default=6, ge=1)
    webhook_backoff_seconds: float = Field(default=2.0, gt=0)
    # Egress policy (app/jobs/egress.py) of webhooks and remote audit targets: public addresses only
    # unless allowed here. DPICL_EGRESS_* are the names; DPICL_WEBHOOK_* (older) are aliases, used when
    # the DPICL_EGRESS_* one is unset. Lists: JSON ('["a","b"]') or comma-separated.
    egress_allow_private: bool | None = None
    egress_allowed_networks: Annotated[list[IPvAnyNetwork] | None, NoDecode] = None
    egress_allowed_hosts: Annotated[list[str] | None, NoDecode] = None
    webhook_allow_private: bool = False
    webhook_allowed_networks: Annotated[list[IPvAnyNetwork], NoDecode] = Field(default_factory=list)
    webhook_allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Credentials of audited targets at rest (app/jobs/secrets.py): comma-separated Fernet keys; the
    # first encrypts, every one decrypts (rotation: put the new key first, keep the old ones until
    # no stored job needs them).
    secrets_key: SecretStr | None = None
    # Web UI (/ui, app/ui): the key that encrypts its session cookies (any string; unset: a random key per
    # process, so sessions end at a restart and each process of a multi-process deployment needs it set),
    # and the cookie's Secure flag (browsers also keep Secure cookies of http://localhost / 127.0.0.1).
    ui_session_secret: SecretStr | None = None
    ui_cookie_secure: bool = True
    ui_session_hours: float = Field(default=12.0, gt=0, le=24 * 30)

    @field_validator("database_url")
    @classmethod
    def _check_db_url(cls, v: str) -> str:
        if not (v.startswith("sqlite") or v.startswith("postgresql")):
            raise ValueError("must be a sqlite:/// or postgresql:// URL")
        return v

    @field_validator("job_concurrency", mode="before")
    @classmethod
    def _auto_concurrency(cls, v):
        if v is None or (isinstance(v, str) and v.strip().lower() in ("", "auto")):
            return auto_job_concurrency()
        if isinstance(v, str) and not v.strip().isdigit():
            raise ValueError('must be an integer from 1 to 64 or "auto"')
        return v

    @field_validator("webhook_allowed_networks", "webhook_allowed_hosts", "egress_allowed_networks",
                     "egress_allowed_hosts", mode="before")
    @classmethod
    def _split_list(cls, v):
        if isinstance(v, str):
            v = v.strip()
            if v.startswith("["):
                return json.loads(v)
            return [x.strip() for x in v.split(",") if x.strip()]
        return v

    @field_validator("webhook_allowed_hosts", "egress_allowed_hosts")
    @classmethod
    def _check_hosts(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return None
        out = []
        for h in v:
            h = h.strip().rstrip(".").lower()
            bare = h[2:] if h.startswith("*.") else h
            if not bare or not re.fullmatch(r"[a-z0-9_.:\[\]-]+", bare) or "*" in bare:
                raise ValueError(f"{h!r} is not a host name, '*.domain' or IP address")
            out.append(h)
        return out

    @field_validator("secrets_key")
    @classmethod
    def _check_secrets_key(cls, v: SecretStr | None) -> SecretStr | None:
        if v is None or not v.get_secret_value().strip():
            return None
        from cryptography.fernet import Fernet

        for i, k in enumerate(x.strip() for x in v.get_secret_value().split(",")):
            try:
                Fernet(k)
            except ValueError:
                raise ValueError(f"entry {i + 1} is not a Fernet key (32 url-safe base64-encoded bytes; make one "
                                 "with: python -c 'from cryptography.fernet import Fernet; "
                                 "print(Fernet.generate_key().decode())')") from None
        return v

    @model_validator(mode="after")
    def _egress_aliases(self) -> "Settings":
        # DPICL_EGRESS_* wins; unset, the older DPICL_WEBHOOK_* name applies (the same policy).
        if self.egress_allow_private is None:
            self.egress_allow_private = self.webhook_allow_private
        if self.egress_allowed_networks is None:
            self.egress_allowed_networks = list(self.webhook_allowed_networks)
        if self.egress_allowed_hosts is None:
            self.egress_allowed_hosts = list(self.webhook_allowed_hosts)
        return self

    @field_validator("model_cache_dir", "artifacts_dir")
    @classmethod
    def _expand(cls, v: Path) -> Path:
        return Path(os.path.expanduser(str(v)))

    @model_validator(mode="after")
    def _check_models(self) -> "Settings":
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError("models: model names must be unique")
        if self.default_model is not None and self.default_model not in names:
            raise ValueError(f"default_model: {self.default_model!r} is not one of the configured models {names}")
        return self

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def default_lm(self) -> str | None:
        if self.default_model:
            return self.default_model
        return next((m.name for m in self.models if m.kind == "lm"), None)


class SettingsError(RuntimeError):
    """Invalid settings; the message names each offending ``DPICL_*`` variable."""


def describe_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = [str(x) for x in err.get("loc", ()) if x not in ("__root__",)]
        field = loc[0] if loc else ""
        msg = err.get("msg", "invalid")
        if not field and ":" in msg:
            # model-level validators put the field name first ("models: ...")
            field, _, msg = msg.removeprefix("Value error, ").partition(":")
        name = f"DPICL_{field.upper()}" if field else "DPICL settings"
        sub = ".".join(loc[1:])
        parts.append(f"{name}{'[' + sub + ']' if sub else ''}: {msg.strip()}")
    return "invalid settings: " + "; ".join(parts)


def load_settings(**overrides) -> Settings:
    from pydantic_settings import SettingsError as SourceError

    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise SettingsError(describe_validation_error(exc)) from None
    except SourceError as exc:  # e.g. DPICL_MODELS is not valid JSON
        m = re.search(r'field "(\w+)"', str(exc))
        name = f"DPICL_{m.group(1).upper()}" if m else "DPICL settings"
        raise SettingsError(f"invalid settings: {name}: could not parse the value (expected JSON)") from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
