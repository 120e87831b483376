"""What the sweeps and the monitors read of the inbox: keys whose wake-up was lost, counts by
status, dead turns, open turns per platform. Read only; `shared.pipeline.inbox` writes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, func, or_, select

from shared.db.schema import inbox
from shared.db.schema import routes as routes_table
from shared.pipeline.turn_rows import (
    DEAD,
    FAILED,
    IS_OPEN,
    OPEN_STATUSES,
    RUNNING,
    WAITING,
    TurnRow,
)


def keys_needing_wake(conn: Connection, now: float, limit: int = 1000) -> list[str]:
    """Keys with open turns that are due and no live lease: their wake-up was lost."""
    query = (
        select(inbox.c.session_key)
        .join(routes_table, routes_table.c.session_key == inbox.c.session_key)
        .where(
            inbox.c.status.in_(OPEN_STATUSES),
            or_(inbox.c.not_before.is_(None), inbox.c.not_before <= now),
            or_(routes_table.c.lease_expires_at.is_(None), routes_table.c.lease_expires_at <= now),
        )
        .group_by(inbox.c.session_key)
        .order_by(func.min(inbox.c.received_at))
        .limit(limit)
    )
    return [str(key) for key in conn.execute(query).scalars()]


@dataclass(frozen=True, slots=True)
class InboxSummary:
    waiting: int
    running: int
    dead: int
    failed: int
    oldest_waiting_at: float | None
    leases_held: int


def summary(conn: Connection, now: float) -> InboxSummary:
    rows = conn.execute(
        select(inbox.c.status, func.count())
        .where(inbox.c.status.in_((WAITING, RUNNING, DEAD, FAILED)))
        .group_by(inbox.c.status)
    ).all()
    counts = {str(row[0]): int(row[1]) for row in rows}
    oldest = conn.execute(
        select(func.min(inbox.c.received_at)).where(inbox.c.status.in_(OPEN_STATUSES))
    ).scalar()
    held = conn.execute(
        select(func.count()).where(
            and_(routes_table.c.lease_holder.is_not(None), routes_table.c.lease_expires_at > now)
        )
    ).scalar_one()
    return InboxSummary(
        waiting=int(counts.get(WAITING, 0)),
        running=int(counts.get(RUNNING, 0)),
        dead=int(counts.get(DEAD, 0)),
        failed=int(counts.get(FAILED, 0)),
        oldest_waiting_at=float(oldest) if oldest is not None else None,
        leases_held=int(held),
    )


def dead_turns_after(conn: Connection, after_id: int, limit: int = 100) -> list[TurnRow]:
    rows = conn.execute(
        select(inbox)
        .where(inbox.c.status == DEAD, inbox.c.id > after_id)
        .order_by(inbox.c.id)
        .limit(limit)
    ).all()
    return [TurnRow.from_row(row) for row in rows]


@dataclass(frozen=True, slots=True)
class OpenTurns:
    """One platform's turns not yet finished."""

    waiting: int
    running: int
    oldest_received_at: float | None


def open_by_platform(conn: Connection) -> dict[str, OpenTurns]:
    """Waiting and running turns per platform and the oldest arrival among them: a scan of the
    open turns only (the partial index), cheap enough for every metrics scrape."""
    rows = conn.execute(
        select(inbox.c.platform, inbox.c.status, func.count(), func.min(inbox.c.received_at))
        .where(IS_OPEN)
        .group_by(inbox.c.platform, inbox.c.status)
    ).all()
    found: dict[str, dict[str, Any]] = {}
    for platform, status, count, oldest in rows:
        entry = found.setdefault(str(platform), {WAITING: 0, RUNNING: 0, "oldest": None})
        entry[str(status)] = int(count)
        if oldest is not None and (entry["oldest"] is None or oldest < entry["oldest"]):
            entry["oldest"] = float(oldest)
    return {
        platform: OpenTurns(entry[WAITING], entry[RUNNING], entry["oldest"])
        for platform, entry in found.items()
    }
