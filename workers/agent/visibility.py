"""Who may see which session: the rule behind /resume, /sessions and the session_search tool.

- The terminal (`cli`) has one local user: every terminal session, and only those (a
  Telegram user's conversations do not feed the operator's terminal agent; `hermes sessions`
  is the operator's tool for those).
- On a gateway platform, a person sees the sessions they started on that platform: same
  `source` and same `user_id`. A turn without a user id sees nothing but its own session.
"""

from __future__ import annotations

from sqlalchemy import Connection, and_
from sqlalchemy.sql.elements import ColumnElement

from shared.model import SessionRecord
from shared.platforms import CLI
from shared.store.schema import sessions


def may_see(platform: str, user_id: str | None, session: SessionRecord) -> bool:
    if platform == CLI:
        return session.source == CLI
    return user_id is not None and session.source == platform and session.user_id == user_id


def visible_clause(platform: str, user_id: str | None) -> ColumnElement[bool]:
    """The same rule as a WHERE clause on `sessions`."""
    if platform == CLI:
        return sessions.c.source == CLI
    if user_id is None:
        return sessions.c.id.is_(None)
    return and_(sessions.c.source == platform, sessions.c.user_id == user_id)


def visible_ids(conn: Connection, platform: str, user_id: str | None, ids: set[str]) -> set[str]:
    if not ids:
        return set()
    rows = conn.execute(
        sessions.select()
        .with_only_columns(sessions.c.id)
        .where(sessions.c.id.in_(sorted(ids)), visible_clause(platform, user_id))
    ).scalars()
    return {str(row) for row in rows}
