"""The ``dpicl`` command: serve, migrate, models, privacy (and later worker, audit)."""

from __future__ import annotations

import json
import logging
import sys
from typing import Optional

import typer

from app.config import SettingsError, load_settings

cli = typer.Typer(help="dpicl: differentially private in-context learning, served and audited.", no_args_is_help=True)


def _settings(**overrides):
    try:
        return load_settings(**{k: v for k, v in overrides.items() if v is not None})
    except SettingsError as exc:
        typer.echo(f"dpicl: {exc}", err=True)
        raise typer.Exit(2)


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


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
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level, lifespan="on")


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


def _mount_optional() -> None:
    """Feature CLIs: ``app.cli_<name>`` exports ``<name>_app`` (a Typer) or ``register(cli)``."""
    import importlib

    for name, help_ in (
        ("privacy", "Privacy math: calibrate, convert, empirical bounds."),
        ("audit", "Audit jobs: submit, wait, CI verdicts."),
        ("keys", "API keys: create, list, revoke."),
        ("worker", None),
    ):
        mod = f"app.cli_{name}"
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if not (exc.name and mod.startswith(exc.name)):
                raise
            continue
        if hasattr(m, "register"):
            m.register(cli)
        else:
            cli.add_typer(getattr(m, f"{name}_app"), name=name, help=help_)


_mount_optional()


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
