"""Resuming and leaving: a lineage's newest session, reopening an ended one, binding a route to
it; ending (or dropping) a session when its conversation is left.

A compressed session ends with `end_reason` "compression" and its continuation names it as
`parent_session_id`; resuming any session of such a chain lands on the newest one.

Leaving the terminal (`/exit`, Ctrl-D, the end of `chat -q`) ends its session with
`end_reason` "cli_exit", so `sessions prune` and auto-prune can remove it in time; resuming
reopens it (`sessions.reopen_session`, as Hermes does). A turn the terminal sent before it
left still belongs to that session: the drain runs it there and leaves the session ended
(`runs_in_left_session`); a turn sent after the end (another terminal on the same session)
reopens it. `/new` and `/reset` end a session the same way with their own reasons; a
session that holds nothing (no message, no title — only commands ran in it) is deleted
instead of kept, so repeated `/new` leaves no empty sessions behind (`close_session`).
"""

from __future__ import annotations

from sqlalchemy import Connection, or_, select

from shared.db.schema import sessions
from shared.model import SessionRecord
from shared.pipeline.inbox import has_open_turns
from shared.pipeline.route_sessions import route_session_id
from shared.platforms import CLI
from shared.store.sessions import (
    COMPRESSION,
    delete_session,
    end_session,
    get_session,
    reopen_session,
)

CLI_EXIT = "cli_exit"
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


def holds_nothing(session: SessionRecord) -> bool:
    """No message and no title: a session made only to run commands in."""
    return session.message_count == 0 and session.title is None


def drop_if_empty(conn: Connection, session_id: str) -> None:
    """Delete the session if it holds nothing (made just to run a command)."""
    session = get_session(conn, session_id)
    if session is not None and holds_nothing(session):
        delete_session(conn, session_id)


def close_session(conn: Connection, session_id: str, reason: str, now: float) -> str:
    """End a session with `reason`, or delete it if it holds nothing. Returns "ended",
    "dropped", or "" when it was gone or had ended already."""
    session = get_session(conn, session_id)
    if session is None or session.ended_at is not None:
        return ""
    if holds_nothing(session):
        delete_session(conn, session_id)
        return "dropped"
    return "ended" if end_session(conn, session_id, reason, now) else ""


def leave_terminal(conn: Connection, key: str, now: float) -> str:
    """The terminal on route `key` was left: its terminal session ends ("cli_exit"), or goes
    if it holds nothing and no turn of the route is still waiting for it. A platform's
    session resumed in the terminal is left as it is (its own route still uses it).
    Returns what `close_session` does, "" when nothing changed."""
    session_id = route_session_id(conn, key)
    session = get_session(conn, session_id) if session_id is not None else None
    if session is None or session.source != CLI or session.ended_at is not None:
        return ""
    if has_open_turns(conn, key):  # keep it for them, even if it holds nothing yet
        return "ended" if end_session(conn, session.id, CLI_EXIT, now) else ""
    return close_session(conn, session.id, CLI_EXIT, now)


def runs_in_left_session(
    conn: Connection, session_id: str, end_reason: str | None, ended_at: float, received_at: float
) -> bool:
    """Whether a turn for a route whose session has ended still runs in that session: a turn
    the terminal sent before it was left (it stays ended), or one a terminal still attached
    to it sent afterwards (it is reopened)."""
    if end_reason != CLI_EXIT:
        return False
    if received_at > ended_at:
        reopen_session(conn, session_id)
    return True
