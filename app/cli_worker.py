"""``dpicl worker``: run audit jobs from the PostgreSQL queue (procrastinate)."""

from __future__ import annotations

from typing import Optional

import typer


def register(cli: typer.Typer) -> None:
    @cli.command()
    def worker(
        concurrency: Optional[int] = typer.Option(
            None, "--concurrency", "-c", min=1, max=64, help="jobs at a time (default: DPICL_JOB_CONCURRENCY)"
        ),
        name: Optional[str] = typer.Option(None, help="worker name in job rows and logs (default: host:pid:random)"),
    ) -> None:
        """Run audit jobs (PostgreSQL mode). Start any number, on any number of machines.

        Loads the configured models once, then runs jobs from the queue until SIGINT/SIGTERM;
        a job running at shutdown stops at its next progress point and goes back to the queue.
        """
        import asyncio
        import logging

        from app.cli import _configure_logging, _settings
        from app.jobs.pg_transport import run_worker
        from app.runtime import Runtime

        settings = _settings()
        if settings.is_sqlite:
            typer.echo(
                "dpicl: `dpicl worker` needs PostgreSQL (DPICL_DATABASE_URL=postgresql://...); "
                "with SQLite, jobs run inside `dpicl serve`",
                err=True,
            )
            raise typer.Exit(2)
        _configure_logging(settings.log_level)
        log = logging.getLogger("dpicl.worker")
        try:
            rt = Runtime.create(settings)
        except Exception as exc:
            typer.echo(f"dpicl: cannot open the database: {type(exc).__name__}: {exc}", err=True)
            raise typer.Exit(2)
        try:
            rt.load_models()
        except Exception as exc:
            typer.echo(f"dpicl: a model failed to load: {exc}", err=True)
            raise typer.Exit(2)
        rt.ready = True
        log.info("models loaded: %s", sorted(rt.models) or "none")
        try:
            asyncio.run(run_worker(rt, concurrency=concurrency or settings.job_concurrency, name=name))
        except KeyboardInterrupt:
            pass
        finally:
            rt.close()
