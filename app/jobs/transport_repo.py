"""The SQL of the procrastinate transport (PostgreSQL): queued jobs no procrastinate job will pick up,
and deferring one in the caller's transaction. Reads and writes procrastinate's own tables; the
``audit_jobs`` row stays the source of truth (``app.jobs.repository``)."""

from __future__ import annotations

import json
from datetime import timedelta

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.store.base import utcnow


def queued_without_transport(
    s: Session, lock_prefix: str, *, older_than: float, worker_alive_seconds: float, limit: int = 500
) -> list[str]:
    """Queued jobs that no procrastinate job will pick up: none waiting (``todo``) and none being
    started (``doing``) by a live procrastinate worker. That is a defer lost to a crash between commit
    and defer, a job the reaper queued again, a job a stopping worker handed back. PostgreSQL only;
    reads procrastinate's tables (a rare duplicate defer is harmless: its task finds the row taken)."""
    cutoff = utcnow() - timedelta(seconds=older_than)
    rows = s.execute(
        text(
            "SELECT j.id FROM audit_jobs j WHERE j.status = 'queued' AND j.created_at < :cutoff "
            "AND NOT EXISTS (SELECT 1 FROM procrastinate_jobs p WHERE p.queueing_lock = :prefix || j.id "
            "  AND p.status = 'todo') "
            "AND NOT EXISTS (SELECT 1 FROM procrastinate_jobs p JOIN procrastinate_workers w ON w.id = p.worker_id "
            "  WHERE p.queueing_lock = :prefix || j.id AND p.status = 'doing' "
            "  AND w.last_heartbeat > now() - make_interval(secs => :alive)) "
            "ORDER BY j.created_at LIMIT :limit"
        ),
        {"cutoff": cutoff, "prefix": lock_prefix, "limit": limit, "alive": worker_alive_seconds},
    ).all()
    s.rollback()
    return [r[0] for r in rows]


def enqueue_procrastinate(s: Session, job_id: str, *, queue: str, task_name: str, lock_prefix: str) -> None:
    """Defer procrastinate's "run job X" in the caller's transaction, through procrastinate's own SQL
    function (what ``Task.defer`` runs; its NOTIFY wakes the workers when the transaction commits)."""
    s.execute(
        text(
            "SELECT procrastinate_defer_jobs_v1(ARRAY[ROW(:queue, :task, 0, NULL, :qlock, CAST(:args AS jsonb), "
            "NULL::timestamptz)]::procrastinate_job_to_defer_v1[])"
        ),
        {"queue": queue, "task": task_name, "qlock": lock_prefix + job_id, "args": json.dumps({"job_id": job_id})},
    )


def hand_over(s: Session, lock_prefix: str, *, message_job: str, taken: str) -> None:
    """The task of "run ``message_job``" claimed ``taken`` (the fair order's first): ``taken``'s waiting
    message becomes ``message_job``'s, in the claim's transaction, while ``message_job`` is still queued
    and has none. Otherwise (its message is being started by another worker, or ``message_job`` is not
    queued any more) nothing changes: a message left over runs the next queued job or is skipped, a
    queued row left without one is deferred again by the sweeper (``queued_without_transport``)."""
    if taken == message_job:
        return
    try:
        with s.begin_nested():  # a unique-lock clash with a concurrent defer must not undo the claim
            s.execute(
                text(
                    "UPDATE procrastinate_jobs SET queueing_lock = :prefix || :mine, "
                    "  args = jsonb_build_object('job_id', CAST(:mine AS text)) "
                    "WHERE queueing_lock = :prefix || :taken AND status = 'todo' "
                    "AND EXISTS (SELECT 1 FROM audit_jobs WHERE id = :mine AND status = 'queued') "
                    "AND NOT EXISTS (SELECT 1 FROM procrastinate_jobs p "
                    "  WHERE p.queueing_lock = :prefix || :mine AND p.status = 'todo')"
                ),
                {"prefix": lock_prefix, "mine": message_job, "taken": taken},
            )
    except IntegrityError:
        pass
