"""Resuming: a lineage's newest session, reopening an ended one, binding a route to it.

A compressed session ends with `end_reason` "compression" and its continuation names it as
`parent_session_id`; resuming any session of such a chain lands on the newest one.
"""

from __future__ import annotations

from sqlalchemy import Connection, insert, or_, select, update

from shared.model import SessionRecord
from shared.store.schema import routes, sessions
from shared.store.sessions import get_session

COMPRESSION = "compression"
MAX_CHAIN = 10_000


def lineage_head(conn: Connection, session: SessionRecord) -> SessionRecord:
    """Follow compression continuations from `session` to the newest one."""
    current = session
    for _ in range(MAX_CHAIN):
        if current.end_reason != COMPRESSION:
            return current
        child_id = conn.execute(
            select(sessions.c.id)
            .where(sessions.c.parent_session_id == current.id)
            .order_by(sessions.c.started_at.desc(), sessions.c.id.desc())
            .limit(1)
        ).scalar()
        child = get_session(conn, str(child_id)) if child_id is not None else None
        if child is None:
            return current
        current = child
    return current


def latest_session(conn: Connection, source: str) -> SessionRecord | None:
    """The most recently active session of `source` (e.g. the terminal's last one), skipping
    empty ones: a chat that only ran commands leaves an untitled session with no messages."""
    row = conn.execute(
        select(sessions)
        .where(
            sessions.c.source == source,
            or_(sessions.c.message_count > 0, sessions.c.title.is_not(None)),
        )
        .order_by(sessions.c.last_active_at.desc(), sessions.c.id.desc())
        .limit(1)
    ).first()
    return SessionRecord.from_row(row) if row else None


def reopen_session(conn: Connection, session_id: str) -> bool:
    """Clear the end of a session ended by /new or /reset (never a compressed one)."""
    result = conn.execute(
        update(sessions)
        .where(
            sessions.c.id == session_id,
            sessions.c.ended_at.is_not(None),
            sessions.c.end_reason != COMPRESSION,
        )
        .values(ended_at=None, end_reason=None)
    )
    return result.rowcount > 0


def route_session_id(conn: Connection, key: str) -> str | None:
    """The session a route currently points at (None before its first turn or after /new)."""
    value = conn.execute(select(routes.c.session_id).where(routes.c.session_key == key)).scalar()
    return str(value) if value is not None else None


def bind_route(
    conn: Connection,
    key: str,
    session_id: str,
    *,
    platform: str,
    chat_id: str,
    chat_type: str,
    now: float,
    user_id: str | None = None,
    thread_id: str | None = None,
) -> None:
    """Point the route `key` at `session_id`, creating the route if it has never had a turn."""
    done = conn.execute(
        update(routes)
        .where(routes.c.session_key == key)
        .values(session_id=session_id, pending_title=None, updated_at=now)
    )
    if done.rowcount:
        return
    conn.execute(
        insert(routes).values(
            session_key=key,
            session_id=session_id,
            platform=platform,
            chat_id=chat_id,
            chat_type=chat_type,
            thread_id=thread_id,
            user_id=user_id,
            next_seq=0,
            created_at=now,
            updated_at=now,
        )
    )
