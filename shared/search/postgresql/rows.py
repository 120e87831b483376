"""PostgreSQL reads of the rows search results are made of: messages around an anchor, bookends,
sessions, parents, recent sessions.

They use the DB-API cursor under the SQLAlchemy connection (same transaction): SQLAlchemy's
statement machinery costs ~60 µs a query against ~7 µs for these indexed queries themselves,
and a scroll is a handful of them within a 2 ms budget.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any, cast

import psycopg
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql as postgresql_dialect

from shared.db import schema
from shared.model import MessageRecord, SessionRecord
from shared.store.visibility import Viewer, reach

MESSAGE_COLUMNS = (
    "id, session_id, role, content, timestamp, tool_calls, tool_call_id, tool_name,"
    " token_count, platform_message_id"
)
SESSION_COLUMNS = (
    "id, source, started_at, last_active_at, user_id, session_key, chat_id, chat_type,"
    " thread_id, title, title_source, model, model_config, system_prompt, parent_session_id,"
    " ended_at, end_reason, message_count, input_tokens, output_tokens"
)


def db_of(conn: Connection) -> psycopg.Connection[Any]:
    """The driver connection under `conn` (same transaction, no statement compilation)."""
    return cast(psycopg.Connection[Any], conn.connection.driver_connection)


def marks(values: Sequence[object]) -> str:
    return ", ".join("%s" for _ in values)


def visible(viewer: Viewer | None, sessions: str, params: list[object]) -> str:
    """` AND ...` keeping the sessions (table alias `sessions`) `viewer` reaches, with its
    values appended to `params`; "" when nothing is held back. The condition is
    `shared.store.visibility.reach`, compiled for PostgreSQL."""
    sql, values = _compiled_reach(viewer, sessions)
    params.extend(values)
    return sql


@functools.lru_cache(maxsize=1024)
def _compiled_reach(viewer: Viewer | None, alias: str) -> tuple[str, tuple[object, ...]]:
    """Compiling costs ~1 ms; a viewer's condition is the same text every time."""
    clause = reach(viewer, schema.sessions.alias(alias))
    if clause is None:
        return "", ()
    format_style = postgresql_dialect.dialect(paramstyle="format")  # type: ignore[no-untyped-call]
    compiled = clause.compile(dialect=format_style)
    return f" AND {compiled}", tuple(compiled.params[name] for name in compiled.positiontup or ())


def _role_in(roles: Sequence[str]) -> str:
    return f"role IN ({marks(roles)})"


def _messages(rows: Iterable[Sequence[object]]) -> list[MessageRecord]:
    return [MessageRecord(*row) for row in rows]  # type: ignore[arg-type]


def message(conn: Connection, message_id: int) -> MessageRecord | None:
    found = _messages(
        db_of(conn).execute(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = %s", (message_id,))
    )
    return found[0] if found else None


def around(
    conn: Connection, anchor: MessageRecord, size: int, roles: Sequence[str]
) -> list[MessageRecord]:
    """Up to `size` messages of `roles` each side of the anchor, and the anchor, in order."""
    db = db_of(conn)
    base = (
        f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = %s AND role IN ({marks(roles)})"
    )
    params = (anchor.session_id, *roles, anchor.id, size)
    earlier = _messages(db.execute(f"{base} AND id < %s ORDER BY id DESC LIMIT %s", params))
    later = _messages(db.execute(f"{base} AND id > %s ORDER BY id LIMIT %s", params))
    return [*reversed(earlier), anchor, *later]


def ends(
    conn: Connection, session_id: str, roles: Sequence[str], count: int
) -> tuple[list[MessageRecord], list[MessageRecord]]:
    """The first and the last `count` messages of `roles` (oldest first in both)."""
    db = db_of(conn)
    base = (
        f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = %s AND role IN ({marks(roles)})"
    )
    params = (session_id, *roles, count)
    first = _messages(db.execute(f"{base} ORDER BY id LIMIT %s", params))
    last = _messages(db.execute(f"{base} ORDER BY id DESC LIMIT %s", params))
    return first, list(reversed(last))


def sessions_by_id(
    conn: Connection, ids: Iterable[str], viewer: Viewer | None = None
) -> dict[str, SessionRecord]:
    """The sessions of `ids` that `viewer` may see (None: all of them)."""
    wanted = list(set(ids))
    if not wanted:
        return {}
    params: list[object] = [*wanted]
    seen = visible(viewer, "sessions", params)
    rows = db_of(conn).execute(
        f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id IN ({marks(wanted)}){seen}", params
    )
    return {str(row[0]): SessionRecord(*row) for row in rows}


def parents(conn: Connection, ids: Iterable[str]) -> dict[str, str | None]:
    wanted = list(set(ids))
    if not wanted:
        return {}
    rows = db_of(conn).execute(
        f"SELECT id, parent_session_id FROM sessions WHERE id IN ({marks(wanted)})", wanted
    )
    return {str(row[0]): (None if row[1] is None else str(row[1])) for row in rows}


def recent_sessions(
    conn: Connection,
    *,
    source: str | None,
    exclude: str | None,
    limit: int,
    offset: int,
    viewer: Viewer | None = None,
) -> list[SessionRecord]:
    """Sessions by latest activity (ix_sessions_last_active / ix_sessions_source_last_active),
    of those `viewer` may see."""
    params: list[object] = []
    where = "WHERE TRUE" + visible(viewer, "sessions", params)
    if source is not None:
        where += " AND source = %s"
        params.append(source)
    if exclude is not None:
        where += " AND id != %s"
        params.append(exclude)
    rows = db_of(conn).execute(
        f"SELECT {SESSION_COLUMNS} FROM sessions {where}"
        " ORDER BY last_active_at DESC, id DESC LIMIT %s OFFSET %s",
        (*params, limit, offset),
    )
    return [SessionRecord(*row) for row in rows]


def first_text(conn: Connection, session_id: str, role: str, chars: int) -> str:
    row = (
        db_of(conn)
        .execute(
            "SELECT substr(content, 1, %s) FROM messages WHERE session_id = %s AND role = %s"
            " ORDER BY id LIMIT 1",
            (chars, session_id, role),
        )
        .fetchone()
    )
    return "" if row is None or row[0] is None else str(row[0])


def count_between(
    conn: Connection, session_id: str, roles: Sequence[str], low: int, high: int
) -> int:
    row = (
        db_of(conn)
        .execute(
            f"SELECT count(*) FROM messages WHERE session_id = %s AND role IN ({marks(roles)})"
            " AND id > %s AND id < %s",
            (session_id, *roles, low, high),
        )
        .fetchone()
    )
    return 0 if row is None else int(row[0])
