"""``dpicl worker``: run audit jobs from the PostgreSQL queue (procrastinate)."""

from __future__ import annotations

from typing import Optional

import typer


def register(cli: typer.Typer) -> None:
    @cli.command()
    def worker(
        concurrency: Optional[int] = typer.Option(
            None, "--concurrency", "-c", min=1, max=64, help="jobs at a time (default: DPICL_JOB_CONCURRENCY; auto: 2 to 4 from the usable cores)"
        ),
        name: Optional[str] = typer.Option(None, help="worker name in job rows and logs (default: host:pid:random)"),
    ) -> None:
        """Run audit jobs (PostgreSQL mode). Start any number, on any number of machines.

        Loads the configured models once, then runs jobs from the queue until SIGINT/SIGTERM;
        a job running at shutdown stops at its next progress point and goes back to the queue.
        """
        import asyncio
        import logging

        from app.cli.common import _configure_logging, _settings
        from app.jobs.pg_transport import run_worker

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
            rt = _create_runtime(settings, log)
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


def _create_runtime(settings, log, attempts: int = 5):
    """Runtime.create, which migrates on start-up: workers started side by side take turns
    (an advisory lock), and a race with a server migrating at the same moment is retried."""
    import time
    from contextlib import contextmanager

    import psycopg

    from app.jobs.pg_transport import conninfo
    from app.runtime import Runtime

    @contextmanager
    def migration_lock():
        with psycopg.connect(conninfo(settings.database_url), autocommit=True) as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (4_711_402_027,))
            try:
                yield
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (4_711_402_027,))

    for attempt in range(1, attempts + 1):
        try:
            with migration_lock():
                return Runtime.create(settings)
        except Exception as exc:
            if attempt == attempts:
                raise
            log.warning("database set-up failed (%s: %s); retrying", type(exc).__name__, str(exc).splitlines()[0])
            time.sleep(attempt)
