"""Cron jobs: stored schedules, and the per-slot run record that makes each slot run once."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import Connection, Row, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from shared.db.schema import cron_jobs, cron_runs
from shared.maintenance import due_cron_slot, next_slot, validate_cron
from shared.pipeline import inbox
from shared.platforms import CRON, DM
from shared.session_key import derive_session_key
from shared.turns import InboundTurn


class CronError(ValueError):
    """A job that cannot be added or found; the message says why."""


@dataclass(frozen=True, slots=True)
class CronJob:
    id: str
    name: str
    schedule: str
    timezone: str
    prompt: str
    paused: int
    created_at: float
    deliver_platform: str | None = None
    deliver_chat: str | None = None
    last_slot: float | None = None

    @classmethod
    def from_row(cls, row: Row[Any]) -> CronJob:
        data = row._mapping
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})

    def next_run(self, now: float) -> float:
        return next_slot(self.schedule, self.timezone, now)


MAX_PROMPT_CHARS = 8000


def add_job(
    conn: Connection,
    *,
    schedule: str,
    prompt: str,
    now: float,
    name: str | None = None,
    timezone: str = "UTC",
    deliver_platform: str | None = None,
    deliver_chat: str | None = None,
) -> CronJob:
    validate_cron(schedule, timezone)
    if not prompt.strip():
        raise CronError("the prompt is empty")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise CronError(f"the prompt is {len(prompt)} characters; the limit is {MAX_PROMPT_CHARS}")
    job_id = secrets.token_hex(4)
    label = (name or "").strip() or f"job-{job_id}"
    try:
        with conn.begin_nested():
            conn.execute(
                insert(cron_jobs).values(
                    id=job_id,
                    name=label,
                    schedule=schedule.strip(),
                    timezone=timezone,
                    prompt=prompt,
                    deliver_platform=deliver_platform,
                    deliver_chat=deliver_chat,
                    created_at=now,
                )
            )
    except IntegrityError:
        raise CronError(f"a job named {label!r} already exists") from None
    return require_job(conn, job_id)


def list_jobs(conn: Connection) -> list[CronJob]:
    rows = conn.execute(select(cron_jobs).order_by(cron_jobs.c.created_at))
    return [CronJob.from_row(row) for row in rows]


def find_job(conn: Connection, ref: str) -> CronJob | None:
    row = conn.execute(
        select(cron_jobs).where((cron_jobs.c.id == ref) | (cron_jobs.c.name == ref))
    ).first()
    return CronJob.from_row(row) if row else None


def require_job(conn: Connection, ref: str) -> CronJob:
    job = find_job(conn, ref)
    if job is None:
        raise CronError(f"Cron job '{ref}' not found.")
    return job


def set_paused(conn: Connection, ref: str, paused: bool) -> CronJob:
    job = require_job(conn, ref)
    conn.execute(update(cron_jobs).where(cron_jobs.c.id == job.id).values(paused=int(paused)))
    return require_job(conn, job.id)


def remove_job(conn: Connection, ref: str) -> CronJob:
    job = require_job(conn, ref)
    conn.execute(delete(cron_jobs).where(cron_jobs.c.id == job.id))
    return job


def claim_slot(conn: Connection, job: CronJob, slot: float, now: float, *, manual: bool) -> bool:
    """Record that `job` runs for `slot`; False if that slot was already claimed (by anyone)."""
    try:
        with conn.begin_nested():
            conn.execute(
                insert(cron_runs).values(
                    job_id=job.id, slot=slot, manual=int(manual), created_at=now
                )
            )
    except IntegrityError:
        return False
    if not manual:
        conn.execute(update(cron_jobs).where(cron_jobs.c.id == job.id).values(last_slot=slot))
    return True


def set_run_turn(conn: Connection, job: CronJob, slot: float, turn_id: int) -> None:
    conn.execute(
        update(cron_runs)
        .where(cron_runs.c.job_id == job.id, cron_runs.c.slot == slot)
        .values(turn_id=turn_id)
    )


def due_jobs(conn: Connection, now: float) -> list[tuple[CronJob, float]]:
    """(job, slot) for every unpaused job whose latest slot has not run yet."""
    due = []
    for job in list_jobs(conn):
        if job.paused:
            continue
        slot = due_cron_slot(
            job.schedule, job.timezone, created_at=job.created_at, last_slot=job.last_slot, now=now
        )
        if slot is not None:
            due.append((job, slot))
    return due


def run_turn(job: CronJob, slot: float) -> InboundTurn:
    """The job's turn for `slot`: its own chat (one session per job), one event per slot."""
    return InboundTurn(
        platform=CRON,
        chat_id=job.id,
        chat_type=DM,
        event_id=f"{job.id}:{slot:.3f}",
        text=job.prompt,
        user_id=f"cron:{job.id}",
    )


@dataclass(frozen=True, slots=True)
class StartedRun:
    turn_id: int
    session_key: str


def start_run(
    conn: Connection, job: CronJob, slot: float, now: float, *, manual: bool
) -> StartedRun | None:
    """Claim (job, slot) and record its turn in the same transaction; None if already claimed.

    The caller wakes the session's drain after commit.
    """
    if not claim_slot(conn, job, slot, now, manual=manual):
        return None
    turn = run_turn(job, slot)
    key = derive_session_key(turn)
    recorded = inbox.record_turn(conn, turn, key, now=now, kind="cron")
    set_run_turn(conn, job, slot, recorded.turn_id)
    return StartedRun(recorded.turn_id, key.key)
