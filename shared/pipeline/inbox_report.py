"""What the sweeps and the monitors read of the inbox: keys whose wake-up was lost, counts by
status, dead turns, open turns per platform; and the lookups of turns by event, id and key that
`shared.pipeline.inbox` re-exports. Read only; `shared.pipeline.inbox` writes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, bindparam, func, or_, select

from shared.db.prepared import Prepared
from shared.db.schema import inbox
from shared.db.schema import routes as routes_table
from shared.pipeline.turn_rows import (
    CANCELLED,
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


# Looking up a batch's events at once: a statement per size, padded to a power of two.
_FIND_MANY = 64
_FIND_EVENTS: dict[int, Prepared] = {}
_HAS_OPEN = select(inbox.c.id).where(inbox.c.session_key == bindparam("b_key"), IS_OPEN).limit(1)
_GET_TURN = select(inbox).where(inbox.c.id == bindparam("b_id"))


def find_events(conn: Connection, platform: str, event_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The recorded turns among `event_ids` of `platform` (id, event_id, session_key, seq)."""
    found: list[dict[str, Any]] = []
    for start in range(0, len(event_ids), _FIND_MANY):
        chunk = list(event_ids[start : start + _FIND_MANY])
        size = 1 << (len(chunk) - 1).bit_length()  # padded with the last id: one plan per size
        stmt = _FIND_EVENTS.get(size)
        if stmt is None:
            stmt = _FIND_EVENTS[size] = Prepared(
                select(inbox.c.id, inbox.c.event_id, inbox.c.session_key, inbox.c.seq).where(
                    inbox.c.platform == bindparam("b_platform"),
                    inbox.c.event_id.in_([bindparam(f"b_e{n}") for n in range(size)]),
                )
            )
        params: dict[str, Any] = {"b_platform": platform}
        for n in range(size):
            params[f"b_e{n}"] = chunk[min(n, len(chunk) - 1)]
        found.extend(stmt.all(conn, params))
    return found


def cancelled_before(conn: Connection, key: str, seq: int, since: float) -> bool:
    """Whether a turn of `key` older than `seq` was cancelled at or after `since` (a /stop
    that arrived at `since` found it running)."""
    found = conn.execute(
        select(inbox.c.id).where(
            inbox.c.session_key == key,
            inbox.c.status == CANCELLED,
            inbox.c.seq < seq,
            inbox.c.finished_at >= since,
        )
    ).first()
    return found is not None


def get_turn(conn: Connection, turn_id: int) -> TurnRow | None:
    row = conn.execute(_GET_TURN, {"b_id": turn_id}).first()
    return TurnRow.from_row(row) if row else None


def has_open_turns(conn: Connection, key: str) -> bool:
    return conn.execute(_HAS_OPEN, {"b_key": key}).first() is not None
