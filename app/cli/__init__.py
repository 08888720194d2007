"""The ``dpicl`` command: serve, migrate, models; one module per command group (audit, budget, keys, privacy, worker)."""

from __future__ import annotations

import json
from typing import Optional

import typer

from app.cli import audit as _audit
from app.cli import budget as _budget
from app.cli import datasets as _datasets
from app.cli import keys as _keys
from app.cli import privacy as _privacy
from app.cli import worker as _worker
from app.cli.common import _configure_logging, _settings

cli = typer.Typer(help="dpicl: differentially private in-context learning, served and audited.", no_args_is_help=True)


@cli.command()
def serve(
    host: Optional[str] = typer.Option(None, help="bind address (default: DPICL_HOST)"),
    port: Optional[int] = typer.Option(None, help="port (default: DPICL_PORT)"),
) -> None:
    """Start the HTTP service (loads models before accepting traffic)."""
    import uvicorn

    from app.api.main import create_app

    settings = _settings(host=host, port=port)
    _configure_logging(settings.log_level)
    app = create_app(settings)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level, lifespan="on",
                timeout_graceful_shutdown=settings.shutdown_timeout_seconds)


@cli.command()
def migrate(revision: str = typer.Argument("head", help="target revision")) -> None:
    """Apply database migrations (Alembic) to DPICL_DATABASE_URL."""
    from app.runtime import _ensure_sqlite_dir
    from app.store import migrate as m

    settings = _settings()
    _ensure_sqlite_dir(settings.database_url)
    m.upgrade(settings.database_url, revision)
    typer.echo(f"database at revision {m.current_revision(settings.database_url)}")


@cli.command()
def models(
    warm: bool = typer.Option(False, "--warm", help="load every configured model (fills the model cache)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """List the configured models; with --warm, load them and show their capabilities."""
    settings = _settings()
    rows = []
    for mc in settings.models:
        row = {"name": mc.name, "kind": mc.kind, "backend": mc.backend, "source": mc.source}
        if warm:
            import time

            from app.llm import ModelSpec, load_model

            t0 = time.perf_counter()
            spec = ModelSpec(name=mc.name, kind=mc.kind, source=mc.source, backend=mc.backend, options=dict(mc.options))
            try:
                model = load_model(spec, cache_dir=settings.model_cache_dir, device=settings.device, dtype=settings.dtype)
            except Exception as exc:
                typer.echo(f"dpicl: model {mc.name!r} failed to load: {exc}", err=True)
                raise typer.Exit(2)
            row["load_seconds"] = round(time.perf_counter() - t0, 2)
            row["capabilities"] = model.capabilities().to_dict()
        rows.append(row)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    else:
        for r in rows:
            extra = f"  loaded in {r['load_seconds']} s" if "load_seconds" in r else ""
            typer.echo(f"{r['name']:<28} {r['kind']:<9} {r['backend']:<7} {r['source']}{extra}")


# Explicit registration: a command group that fails to import is an error, not a missing feature.
cli.add_typer(_privacy.privacy_app, name="privacy", help="Privacy math: calibrate, convert, empirical bounds.")
cli.add_typer(_audit.audit_app, name="audit", help="Audit jobs: submit, wait, CI verdicts.")
cli.add_typer(_budget.budget_app, name="budget", help="Privacy budgets: forecast remaining answers.")
cli.add_typer(_keys.keys_app, name="keys", help="API keys: create, list, revoke.")
cli.add_typer(_datasets.datasets_app, name="datasets", help="Datasets: list and load the bundled sample tasks.")
_worker.register(cli)


def main() -> None:
    cli()

