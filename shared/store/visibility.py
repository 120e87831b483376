"""Who may reach which session: the one rule, as a WHERE clause on `sessions`.

- On the terminal (`cli`) the person at the keyboard owns this HERMES_HOME: every session,
  from every platform (the agent searches "across all past conversations").
- On a gateway platform (and for a cron job's own turns) a person reaches the sessions they
  started there: same `source`, same `user_id`. A turn without a user id reaches none.
- The operator's tools (`hermes -r`, `hermes sessions …`) pass no viewer: every session.

`/resume`, `/sessions`, `hermes -c`/`-r` and the `session_search` tool all filter with
`reach()`; the SQLite search backend compiles the very same clause into its own statements.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, Connection, FromClause, and_, false, func, select

from shared.db.schema import sessions
from shared.model import SessionRecord
from shared.platforms import CLI


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who asks: the platform their turn came from and their user id there."""

    platform: str
    user_id: str | None = None

    @property
    def owner(self) -> bool:
        """The terminal's user owns the home and reaches everything."""
        return self.platform == CLI


def reach(viewer: Viewer | None, table: FromClause = sessions) -> ColumnElement[bool] | None:
    """The sessions (rows of `table`, `sessions` or an alias of it) `viewer` may reach, as a
    condition; None when nothing is held back (the owner, the operator)."""
    if viewer is None or viewer.owner:
        return None
    if viewer.user_id is None:
        return false()
    return and_(table.c.source == viewer.platform, table.c.user_id == viewer.user_id)


def within(viewer: Viewer | None, table: FromClause = sessions) -> list[ColumnElement[bool]]:
    """`reach()` as a list for `.where(*within(viewer))`: empty when nothing is held back."""
    clause = reach(viewer, table)
    return [] if clause is None else [clause]


def recent_sessions(
    conn: Connection, viewer: Viewer | None, limit: int
) -> tuple[list[SessionRecord], int]:
    """The newest `limit` sessions with messages that `viewer` reaches, and how many there are."""
    listed = [*within(viewer), sessions.c.message_count > 0]
    rows = conn.execute(
        select(sessions)
        .where(*listed)
        .order_by(sessions.c.last_active_at.desc(), sessions.c.id.desc())
        .limit(limit)
    ).all()
    total = conn.execute(select(func.count()).select_from(sessions).where(*listed)).scalar_one()
    return [SessionRecord.from_row(row) for row in rows], int(total)
