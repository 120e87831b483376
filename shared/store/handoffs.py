"""Handoffs: `/handoff <platform>` requests and their state (owner of the `handoffs` table).

pending (the terminal asked; nobody has it) → running (one worker claimed it) → completed, or
failed with the reason. A claim is one conditional UPDATE, so two workers woken for the same
request (the wake-up and the redrive sweep) never both run it; a pending request past its
deadline can no longer be claimed, and whoever sees that first fails it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, insert, select, update

from shared.db.schema import handoffs, inbox

PENDING = "pending"
RUNNING = "running"
COMPLETED = "completed"
FAILED = "failed"
OPEN = (PENDING, RUNNING)


@dataclass(frozen=True, slots=True)
class Handoff:
    id: int
    session_id: str
    source_key: str
    platform: str
    status: str
    error: str | None
    chat_id: str | None
    thread_id: str | None
    target_key: str | None
    requested_at: float
    deadline: float


def _row(found: object) -> Handoff:
    m = found._mapping  # type: ignore[attr-defined]
    return Handoff(
        id=int(m["id"]),
        session_id=str(m["session_id"]),
        source_key=str(m["source_key"]),
        platform=str(m["platform"]),
        status=str(m["status"]),
        error=m["error"],
        chat_id=m["chat_id"],
        thread_id=m["thread_id"],
        target_key=m["target_key"],
        requested_at=float(m["requested_at"]),
        deadline=float(m["deadline"]),
    )


def request(
    conn: Connection, session_id: str, source_key: str, platform: str, now: float, timeout: float
) -> int:
    """A new pending request; its id."""
    result = conn.execute(
        insert(handoffs).values(
            session_id=session_id,
            source_key=source_key,
            platform=platform,
            status=PENDING,
            requested_at=now,
            deadline=now + timeout,
        )
    )
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


def get(conn: Connection, handoff_id: int) -> Handoff | None:
    found = conn.execute(select(handoffs).where(handoffs.c.id == handoff_id)).first()
    return _row(found) if found is not None else None


def latest_for(conn: Connection, session_id: str) -> Handoff | None:
    found = conn.execute(
        select(handoffs).where(handoffs.c.session_id == session_id).order_by(handoffs.c.id.desc())
    ).first()
    return _row(found) if found is not None else None


def open_for(conn: Connection, session_id: str) -> Handoff | None:
    found = conn.execute(
        select(handoffs)
        .where(handoffs.c.session_id == session_id, handoffs.c.status.in_(OPEN))
        .order_by(handoffs.c.id.desc())
    ).first()
    return _row(found) if found is not None else None


def claim(conn: Connection, handoff_id: int, now: float, claimer: str | None = None) -> bool:
    """pending → running for exactly one caller, and only before the deadline. `claimer`
    (`<host>:<pid>`) lets that host's next worker fail it if the process dies mid-way."""
    result = conn.execute(
        update(handoffs)
        .where(
            handoffs.c.id == handoff_id,
            handoffs.c.status == PENDING,
            handoffs.c.deadline > now,
        )
        .values(status=RUNNING, claimed_at=now, claimed_by=claimer)
    )
    return result.rowcount == 1


def set_target(
    conn: Connection, handoff_id: int, chat_id: str, thread_id: str | None, target_key: str
) -> None:
    conn.execute(
        update(handoffs)
        .where(handoffs.c.id == handoff_id)
        .values(chat_id=chat_id, thread_id=thread_id, target_key=target_key)
    )


def complete(conn: Connection, handoff_id: int, now: float) -> bool:
    result = conn.execute(
        update(handoffs)
        .where(handoffs.c.id == handoff_id, handoffs.c.status == RUNNING)
        .values(status=COMPLETED, finished_at=now, error=None)
    )
    return result.rowcount == 1


def fail(
    conn: Connection, handoff_id: int, error: str, now: float, *, only: str | None = None
) -> bool:
    """Fail an open request (or only one in state `only`); False if it had already finished."""
    states = (only,) if only is not None else OPEN
    result = conn.execute(
        update(handoffs)
        .where(handoffs.c.id == handoff_id, handoffs.c.status.in_(states))
        .values(status=FAILED, finished_at=now, error=error)
    )
    return result.rowcount == 1


def pending_ids(conn: Connection, now: float, *, limit: int = 100) -> list[int]:
    """Pending requests still claimable (for the redrive sweep)."""
    rows = conn.execute(
        select(handoffs.c.id)
        .where(handoffs.c.status == PENDING, handoffs.c.deadline > now)
        .order_by(handoffs.c.id)
        .limit(limit)
    )
    return [int(found) for found in rows.scalars()]


def fail_stale(conn: Connection, error: str, now: float, claimed_before: float) -> int:
    """Fail what a worker left running (it died or restarted mid-way): never deliver twice."""
    result = conn.execute(
        update(handoffs)
        .where(handoffs.c.status == RUNNING, handoffs.c.claimed_at < claimed_before)
        .values(status=FAILED, finished_at=now, error=error)
    )
    return int(result.rowcount)


def running_claims(conn: Connection, host: str) -> list[tuple[int, str]]:
    """Running requests claimed by processes of `host`: (id, claimer)."""
    rows = conn.execute(
        select(handoffs.c.id, handoffs.c.claimed_by).where(
            handoffs.c.status == RUNNING, handoffs.c.claimed_by.startswith(host + ":")
        )
    )
    return [(int(found.id), str(found.claimed_by)) for found in rows]


def reply_in_progress(conn: Connection, session_id: str, except_turn: int) -> bool:
    """Is a turn of this session (other than `except_turn`) being answered right now?"""
    found = conn.execute(
        select(inbox.c.id)
        .where(
            inbox.c.session_id == session_id,
            inbox.c.status == "running",
            inbox.c.id != except_turn,
        )
        .limit(1)
    ).first()
    return found is not None
