"""What the sweeps read and write: reset candidates, the memory turn, untitled sessions."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, select

from shared.db.schema import inbox as inbox_table
from shared.db.schema import routes, sessions
from shared.pipeline import inbox, outbox, route_sessions
from shared.platforms import GATEWAY_PLATFORMS
from shared.session_key import SessionKey
from shared.store import sessions as session_rows
from shared.turns import InboundTurn

MEMORY_FLUSH = "memory_flush"
FLUSH_PROMPT = (
    "This conversation is about to be reset and you will not see it again. Use the memory "
    "tool now to save anything about the user worth remembering in later conversations "
    "(preferences, facts, ongoing work). Then answer with one short line; it is not shown."
)
FINISHED = (inbox.DONE, inbox.FAILED, inbox.DEAD, inbox.CANCELLED)


@dataclass(frozen=True, slots=True)
class ResetCandidate:
    session_id: str
    session_key: str
    platform: str
    chat_id: str
    chat_type: str
    thread_id: str | None
    user_id: str | None
    last_active_at: float
    message_count: int


def reset_candidates(conn: Connection, *, limit: int = 500) -> list[ResetCandidate]:
    """Live gateway sessions that are their key's current session, least recently active first."""
    rows = conn.execute(
        select(
            sessions.c.id,
            routes.c.session_key,
            routes.c.platform,
            routes.c.chat_id,
            routes.c.chat_type,
            routes.c.thread_id,
            routes.c.user_id,
            sessions.c.last_active_at,
            sessions.c.message_count,
        )
        .join(routes, routes.c.session_id == sessions.c.id)
        .where(sessions.c.ended_at.is_(None), routes.c.platform.in_(sorted(GATEWAY_PLATFORMS)))
        .order_by(sessions.c.last_active_at)
        .limit(limit)
    ).all()
    return [ResetCandidate(*row) for row in rows]


def busy(conn: Connection, key: str, *, except_kind: str | None = None) -> bool:
    """True while the key has a turn waiting or running (other than of `except_kind`)."""
    query = select(inbox_table.c.id).where(
        inbox_table.c.session_key == key, inbox_table.c.status.in_(inbox.OPEN_STATUSES)
    )
    if except_kind is not None:
        query = query.where(inbox_table.c.kind != except_kind)
    return conn.execute(query.limit(1)).first() is not None


def flush_event(candidate: ResetCandidate) -> str:
    """One memory turn per session and stretch of activity: a restart or a second beat finds
    the same event id, so the turn is recorded (and run) once."""
    return f"reset-memory:{candidate.session_id}:{candidate.last_active_at:.3f}"


def flush_status(conn: Connection, candidate: ResetCandidate) -> str | None:
    """None if the memory turn was never recorded, else its status."""
    found = inbox.find_event(conn, candidate.platform, flush_event(candidate))
    if found is None:
        return None
    turn = inbox.get_turn(conn, found.turn_id)
    return turn.status if turn else None


def record_flush(conn: Connection, candidate: ResetCandidate, now: float) -> bool:
    """Queue the memory turn in the session's own line (so it never races a user's turn)."""
    turn = InboundTurn(
        platform=candidate.platform,
        chat_id=candidate.chat_id,
        chat_type=candidate.chat_type,
        thread_id=candidate.thread_id,
        user_id=candidate.user_id,
        event_id=flush_event(candidate),
        text=FLUSH_PROMPT,
    )
    recorded = inbox.record_turn(
        conn,
        turn,
        SessionKey(candidate.session_key, shared=False),
        now=now,
        kind=MEMORY_FLUSH,
        flush_session_id=candidate.session_id,
    )
    return not recorded.duplicate


def end_for_reset(
    conn: Connection, candidate: ResetCandidate, reason: str, now: float, notice: str | None
) -> bool:
    """End the session, detach it from its key and queue the notice; False if it moved on."""
    if not session_rows.end_session(conn, candidate.session_id, reason, now):
        return False
    route_sessions.detach_session(conn, candidate.session_key, candidate.session_id, now)
    if notice:
        outbox.add(
            conn,
            platform=candidate.platform,
            chat_id=candidate.chat_id,
            thread_id=candidate.thread_id,
            session_id=candidate.session_id,
            text=notice,
            now=now,
        )
    return True


def untitled_sessions(conn: Connection, *, quiet_since: float, limit: int = 100) -> list[str]:
    """Sessions past their first exchange that still have no title (their title task was lost)."""
    rows = conn.execute(
        select(sessions.c.id)
        .where(
            sessions.c.title.is_(None),
            sessions.c.message_count >= 2,
            sessions.c.last_active_at < quiet_since,
            sessions.c.source != "cron",
        )
        .order_by(sessions.c.last_active_at.desc())
        .limit(limit)
    ).scalars()
    return [str(session_id) for session_id in rows]
