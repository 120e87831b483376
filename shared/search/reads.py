"""The reads search results are made of — messages around an anchor, bookends, sessions,
parents, recent sessions — written once for both dialects.

They use the DB-API cursor under the SQLAlchemy connection (same transaction): SQLAlchemy's
statement machinery costs ~60 µs a query against ~7 µs for these indexed queries themselves,
and a scroll is a handful of them within a 2 ms budget. So the SQL is plain text with `?`
marks, turned into the driver's own (`%s` for psycopg) by each backend's `Reads`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import Connection

from shared.model import SessionRecord, tool_call_list
from shared.search.backend import Filters
from shared.store.visibility import Viewer

MESSAGE_COLUMNS = (
    "id, session_id, role, content, timestamp, tool_calls, tool_call_id, tool_name,"
    " token_count, platform_message_id"
)
SESSION_COLUMNS = (
    "id, source, started_at, last_active_at, user_id, session_key, chat_id, chat_type,"
    " thread_id, title, title_source, model, model_config, system_prompt, parent_session_id,"
    " ended_at, end_reason, message_count, input_tokens, output_tokens"
)


class Message(NamedTuple):
    """A message as search reads and shows it: `shared.model.MessageRecord`'s fields, in its
    order (MESSAGE_COLUMNS), as a tuple. A discover builds ~50 of these a call: as frozen
    dataclasses they cost 72 us, as tuples 12 (tests/unit/test_search_message.py keeps the
    two alike)."""

    id: int
    session_id: str
    role: str
    content: str | None
    timestamp: float
    tool_calls: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    token_count: int | None = None
    platform_message_id: str | None = None

    @property
    def tool_call_list(self) -> list[dict[str, Any]]:
        return tool_call_list(self.tool_calls)


_row_message = Message._make


def _messages(rows: Iterable[Sequence[Any]]) -> list[Message]:
    return list(map(_row_message, rows))


@dataclass(frozen=True, slots=True)
class Shown:
    """What a result shows of its session: the anchor, the window around it (anchor included,
    in order) and the first and last messages (bookends, oldest first in both)."""

    anchor: Message
    window: list[Message]
    first: list[Message]
    last: list[Message]


# The parts of `Reads.shown`, each a subquery of ids per anchor (`?` for the session, roles, id,
# size; the anchor itself is its own id).
_EARLIER, _LATER, _FIRST, _LAST = range(4)
_PART = {
    _EARLIER: "{base} AND id < ? ORDER BY id DESC LIMIT ?",
    _LATER: "{base} AND id > ? ORDER BY id LIMIT ?",
    _FIRST: "{base} ORDER BY id LIMIT ?",
    _LAST: "{base} ORDER BY id DESC LIMIT ?",
}


class Reads:
    """One dialect's reads: its driver connection, its visibility clause and its mark."""

    def __init__(
        self,
        db_of: Callable[[Connection], Any],
        visible: Callable[[Viewer | None, str, list[object]], str],
        mark: str,
    ) -> None:
        self._db_of = db_of
        self._visible = visible
        self._mark = mark

    def _run(self, conn: Connection, sql: str, params: Sequence[object]) -> Any:
        if self._mark != "?":
            sql = sql.replace("?", self._mark)  # no `?` in these queries but the marks
        return self._db_of(conn).execute(sql, params)

    def marks(self, values: Sequence[object]) -> str:
        return ", ".join(self._mark for _ in values)

    def filter_sql(self, filters: Filters, params: list[object]) -> tuple[str, str]:
        """(JOIN clause, WHERE conditions) on messages `m` for roles, source, the excluded
        session and the viewer; their values appended to `params`."""
        where = f" AND m.role IN ({self.marks(filters.roles)})"
        params.extend(filters.roles)
        join = ""
        if filters.exclude_session_id is not None:
            where += f" AND m.session_id != {self._mark}"
            params.append(filters.exclude_session_id)
        if filters.source is not None:
            where += f" AND s.source = {self._mark}"
            params.append(filters.source)
        reached = self._visible(filters.viewer, "s", params)
        where += reached
        if filters.source is not None or reached:
            join = " JOIN sessions AS s ON s.id = m.session_id"
        return join, where

    def message(self, conn: Connection, message_id: int) -> Message | None:
        sql = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?"
        found = _messages(self._run(conn, sql, (message_id,)))
        return found[0] if found else None

    def around(
        self, conn: Connection, anchor: Message, size: int, roles: Sequence[str]
    ) -> list[Message]:
        """Up to `size` messages of `roles` each side of the anchor, and the anchor, in order."""
        base = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ? AND {_roles(roles)}"
        params = (anchor.session_id, *roles, anchor.id, size)
        earlier = _messages(self._run(conn, f"{base} AND id < ? ORDER BY id DESC LIMIT ?", params))
        later = _messages(self._run(conn, f"{base} AND id > ? ORDER BY id LIMIT ?", params))
        return [*reversed(earlier), anchor, *later]

    def shown(
        self,
        conn: Connection,
        anchors: Sequence[tuple[int, str]],
        size: int,
        roles: Sequence[str],
        ends: Sequence[str],
        count: int,
    ) -> dict[int, Shown]:
        """For each (message id, its session id) of `anchors`: `around(anchor, size, roles)` and
        `ends(session, ends, count)`, all in one statement: a discover's results cost one round
        trip instead of five per result. By anchor id; an anchor that is not there is left out.

        The statement picks the ids of every part of every anchor from the (session_id, id,
        role) index alone (one subquery each, UNION ALL) and reads each message they name once,
        in id order; the parts are then taken again from those rows (`_parts`). A message in
        two parts (a bookend inside the window) is read once, and no part's rows are sorted."""
        if not anchors:
            return {}
        params: list[object] = []
        for message_id, session_id in anchors:
            params.append(message_id)
            for part in _PART:
                params.append(session_id)
                if part in (_FIRST, _LAST):
                    params.extend((*ends, count))
                else:
                    params.extend((*roles, message_id, size))
        sql = _shown_sql(len(anchors), len(roles), len(ends))
        by_id: dict[int, Message] = {}
        by_session: dict[str, list[Message]] = {}
        for record in map(_row_message, self._run(conn, sql, params)):
            by_id[record.id] = record
            by_session.setdefault(record.session_id, []).append(record)
        out: dict[int, Shown] = {}
        for message_id, session_id in anchors:
            anchor = by_id.get(message_id)
            if anchor is not None:
                rows = by_session.get(session_id, [])
                out[message_id] = _parts(anchor, rows, size, set(roles), set(ends), count)
        return out

    def ends(
        self, conn: Connection, session_id: str, roles: Sequence[str], count: int
    ) -> tuple[list[Message], list[Message]]:
        """The first and the last `count` messages of `roles` (oldest first in both)."""
        base = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ? AND {_roles(roles)}"
        params = (session_id, *roles, count)
        first = _messages(self._run(conn, f"{base} ORDER BY id LIMIT ?", params))
        last = _messages(self._run(conn, f"{base} ORDER BY id DESC LIMIT ?", params))
        return first, list(reversed(last))

    def sessions_by_id(
        self, conn: Connection, ids: Iterable[str], viewer: Viewer | None = None
    ) -> dict[str, SessionRecord]:
        """The sessions of `ids` that `viewer` may see (None: all of them)."""
        wanted = list(set(ids))
        if not wanted:
            return {}
        params: list[object] = [*wanted]
        seen = self._visible(viewer, "sessions", params)
        rows = self._db_of(conn).execute(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id IN ({self.marks(wanted)}){seen}",
            params,
        )
        return {str(row[0]): SessionRecord(*row) for row in rows}

    def parents(self, conn: Connection, ids: Iterable[str]) -> dict[str, str | None]:
        wanted = list(set(ids))
        if not wanted:
            return {}
        rows = self._db_of(conn).execute(
            f"SELECT id, parent_session_id FROM sessions WHERE id IN ({self.marks(wanted)})",
            wanted,
        )
        return {str(row[0]): (None if row[1] is None else str(row[1])) for row in rows}

    def recent_sessions(
        self,
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
        where = "WHERE TRUE" + self._visible(viewer, "sessions", params)
        if source is not None:
            where += f" AND source = {self._mark}"
            params.append(source)
        if exclude is not None:
            where += f" AND id != {self._mark}"
            params.append(exclude)
        rows = self._db_of(conn).execute(
            f"SELECT {SESSION_COLUMNS} FROM sessions {where}"
            f" ORDER BY last_active_at DESC, id DESC LIMIT {self._mark} OFFSET {self._mark}",
            (*params, limit, offset),
        )
        return [SessionRecord(*row) for row in rows]

    def first_text(self, conn: Connection, session_id: str, role: str, chars: int) -> str:
        sql = (
            "SELECT substr(content, 1, ?) FROM messages WHERE session_id = ? AND role = ?"
            " ORDER BY id LIMIT 1"
        )
        row = self._run(conn, sql, (chars, session_id, role)).fetchone()
        return "" if row is None or row[0] is None else str(row[0])

    def count_between(
        self, conn: Connection, session_id: str, roles: Sequence[str], low: int, high: int
    ) -> int:
        sql = (
            f"SELECT count(*) FROM messages WHERE session_id = ? AND {_roles(roles)}"
            " AND id > ? AND id < ?"
        )
        row = self._run(conn, sql, (session_id, *roles, low, high)).fetchone()
        return 0 if row is None else int(row[0])


@functools.lru_cache(maxsize=256)
def _shown_sql(anchors: int, roles: int, ends: int) -> str:
    """The statement of `Reads.shown` for that many anchors, roles and bookend roles (the same
    text every call of a shape: built once, not per call)."""
    parts: list[str] = []
    for at in range(anchors):
        parts.append("SELECT id FROM messages WHERE id = ?")
        for part, shape in _PART.items():
            chosen = ends if part in (_FIRST, _LAST) else roles
            base = "SELECT id FROM messages"
            base += f" WHERE session_id = ? AND role IN ({', '.join('?' * chosen)})"
            parts.append(f"SELECT * FROM ({shape.format(base=base)}) AS p{at}_{part}")
    return (
        f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id IN ({' UNION ALL '.join(parts)})"
        " ORDER BY id"
    )


def _parts(
    anchor: Message,
    rows: list[Message],
    size: int,
    roles: set[str],
    ends: set[str],
    count: int,
) -> Shown:
    """One anchor's `Shown` from the rows `Reads.shown` read of its session (in id order).

    Those rows hold every part's own rows, and other rows besides only where they cannot
    change a part: a row that fits a part's condition but is not one of its rows lies beyond
    them (e.g. before the `size` earlier ones), or the part would have held it. So each part
    is the rows that fit its condition, cut to its limit from the same side as its subquery."""
    earlier = [m for m in rows if m.id < anchor.id and m.role in roles]
    later = [m for m in rows if m.id > anchor.id and m.role in roles]
    either = [m for m in rows if m.role in ends]
    window = [*_last(earlier, size), anchor, *later[:size]]
    return Shown(anchor, window, either[:count], _last(either, count))


def _last(rows: list[Message], count: int) -> list[Message]:
    return rows[-count:] if count > 0 else []


def _roles(roles: Sequence[str]) -> str:
    return f"role IN ({', '.join('?' for _ in roles)})"
