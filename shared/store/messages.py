"""Message rows: append with the session's activity and token counters, read a transcript."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    bindparam,
    case,
    cast,
    delete,
    exists,
    func,
    insert,
    select,
    union_all,
    update,
)

from shared.db.errors import SessionNotFound
from shared.db.prepared import Prepared
from shared.db.schema import messages, sessions
from shared.model import MessageRecord
from shared.pipeline import outbox, routes
from shared.surrogates import LONE_SURROGATE, storable


def encode_tool_calls(tool_calls: Sequence[dict[str, Any]] | str | None) -> str | None:
    if tool_calls is None or isinstance(tool_calls, str):
        return tool_calls
    return json.dumps(list(tool_calls), ensure_ascii=False, separators=(",", ":"))


_BUMPED = (
    update(sessions)
    .where(sessions.c.id == bindparam("b_session"))
    .values(
        last_active_at=case(
            (sessions.c.last_active_at < bindparam("b_now"), bindparam("b_now")),
            else_=sessions.c.last_active_at,
        ),
        input_tokens=sessions.c.input_tokens + bindparam("b_in"),
        output_tokens=sessions.c.output_tokens + bindparam("b_out"),
    )
)
_BUMP = Prepared(_BUMPED)
_COLUMNS = (
    "session_id",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "tool_name",
    "token_count",
    "timestamp",
    "platform_message_id",
)
_INSERT = Prepared(
    insert(messages).values({name: bindparam(name) for name in _COLUMNS}).returning(messages.c.id)
)
# A turn's rows (the user's message, the reply, tool calls and results) in one INSERT of up to
# _MANY rows: one round trip, and on PostgreSQL one run of the statement-level count trigger
# instead of one per row. The rows of a VALUES list are inserted, and their ids drawn, in list
# order on both databases (one statement, one backend, no parallel insert).
_MANY = 8
_INSERT_ROWS = {
    n: Prepared(
        insert(messages).values(
            [{name: bindparam(f"{name}_{i}") for name in _COLUMNS} for i in range(n)]
        )
    )
    for n in range(2, _MANY + 1)
}


def _rows_once_bumped(bumped: Any, n: int) -> Any:
    """`n` bound rows (`<column>_<i>`) in list order, each only once `bumped` (a CTE) found the
    session: the INSERT's source in one statement with the bump."""
    found = select(func.count()).select_from(bumped).scalar_subquery() > 0
    rows = [
        select(*[cast(bindparam(f"{c}_{i}"), messages.c[c].type).label(c) for c in _COLUMNS]).where(
            found
        )
        for i in range(n)
    ]
    return rows[0] if n == 1 else union_all(*rows)


def _bump_and_insert(n: int) -> Prepared:
    """PostgreSQL: the session's activity bump and the INSERT of `n` rows as one statement. The
    rows are inserted only once the bump found the session (a count of its RETURNING rows in
    their WHERE), in list order (one plan, its branches run in turn; no parallel plan writes)."""
    bumped = _BUMPED.returning(sessions.c.id).cte("bumped")
    source = _rows_once_bumped(bumped, n)
    return Prepared(
        insert(messages).from_select(_COLUMNS, source).add_cte(bumped), dialect="postgresql"
    )


_BUMP_AND_INSERT = {n: _bump_and_insert(n) for n in range(1, _MANY + 1)}


def _fenced_bump_and_insert(n: int, reply: bool = False) -> Prepared:
    """PostgreSQL: `_bump_and_insert` with the lease's fence check (`routes.FENCE_CHECK`) ahead
    of it in one statement. The bump runs only once the check found its route row (so the row
    is locked first, as a separate check would lock it), the rows only once the bump found the
    session; the statement answers how many rows each of the two found. With `reply`, the
    turn's reply (`outbox.insert_once`, bound as `outbox.Reply.params`) is written too, once
    the bump found the session, and its id answered as `reply_id`."""
    fenced = routes.FENCE_CHECK.cte("fenced")
    bumped = (
        _BUMPED.where(exists(select(1).select_from(fenced))).returning(sessions.c.id).cte("bumped")
    )
    source = _rows_once_bumped(bumped, n)
    inserted = insert(messages).from_select(_COLUMNS, source).returning(messages.c.id).cte("rows")
    answers = [
        select(func.count()).select_from(fenced).scalar_subquery().label("fenced"),
        select(func.count()).select_from(bumped).scalar_subquery().label("bumped"),
    ]
    ctes = [inserted]
    if reply:
        written = outbox.insert_once(bumped)
        ctes.append(written)
        answers.append(select(written.c.id).scalar_subquery().label("reply_id"))
    return Prepared(select(*answers).add_cte(*ctes), dialect="postgresql")


_FENCED_BUMP_AND_INSERT = {n: _fenced_bump_and_insert(n) for n in range(1, _MANY + 1)}
_FENCED_WITH_REPLY = {n: _fenced_bump_and_insert(n, reply=True) for n in range(1, _MANY + 1)}
# A session's newest `b_count` messages, newest first (`history_from` puts them in order).
LAST_MESSAGES = (
    select(messages)
    .where(messages.c.session_id == bindparam("b_session"))
    .order_by(messages.c.id.desc())
    .limit(bindparam("b_count"))
)
_LAST = Prepared(LAST_MESSAGES)


@dataclass(frozen=True, slots=True)
class NewRow:
    """One message to append (see `append_messages`)."""

    role: str
    content: str | None
    timestamp: float
    tool_calls: Sequence[dict[str, Any]] | str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    token_count: int | None = None
    platform_message_id: str | None = None


def _bump(
    conn: Connection, session_id: str, now: float, input_tokens: int, output_tokens: int
) -> None:
    bumped = _BUMP.rowcount(
        conn, {"b_session": session_id, "b_now": now, "b_in": input_tokens, "b_out": output_tokens}
    )
    if bumped == 0:
        raise SessionNotFound(session_id)


def _storable(text: str | None) -> str | None:
    return storable(text) if text is not None and LONE_SURROGATE.search(text) else text


def _values(session_id: str, row: NewRow) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "role": row.role,
        # A model's reply or a tool's output may hold NUL, which PostgreSQL cannot store: the
        # rule of text from outside (shared.surrogates) keeps a turn the same on both.
        "content": _storable(row.content),
        "tool_calls": _storable(encode_tool_calls(row.tool_calls)),
        "tool_call_id": row.tool_call_id,
        "tool_name": row.tool_name,
        "token_count": row.token_count,
        "timestamp": row.timestamp,
        "platform_message_id": row.platform_message_id,
    }


def append_message(
    conn: Connection,
    session_id: str,
    role: str,
    content: str | None,
    *,
    now: float,
    tool_calls: Sequence[dict[str, Any]] | str | None = None,
    tool_call_id: str | None = None,
    tool_name: str | None = None,
    token_count: int | None = None,
    platform_message_id: str | None = None,
    input_tokens: int = 0,
    output_tokens: int = 0,
) -> int:
    """Append one message and bump the session's activity; returns the message id."""
    _bump(conn, session_id, now, input_tokens, output_tokens)
    row = NewRow(
        role, content, now, tool_calls, tool_call_id, tool_name, token_count, platform_message_id
    )
    return int(_INSERT.scalar(conn, _values(session_id, row)))


def append_messages(
    conn: Connection,
    session_id: str,
    rows: Sequence[NewRow],
    *,
    input_tokens: int = 0,
    output_tokens: int = 0,
    fence: routes.Fence | None = None,
    reply: outbox.Reply | None = None,
) -> outbox.OutboxRow | None:
    """Append a turn's messages in order with one activity bump (ids come in that order).
    `fence`: a fenced write's check (`routes.check_route`), made first; on PostgreSQL it is part
    of the statement that bumps and inserts (LeaseLost when it failed, and nothing written).
    `reply`: the turn's (first) reply, written after the messages (`outbox.add`); on PostgreSQL
    with a fence, in that same statement. Returns its row (None without `reply`)."""
    if not rows:
        if fence is not None:
            fence.check(conn)
        return reply.add(conn) if reply is not None else None
    now = max(r.timestamp for r in rows)
    done = 0
    written: outbox.OutboxRow | None = None
    if conn.dialect.name == "postgresql":  # the check, bump and first rows: one round trip
        done = min(len(rows), _MANY)
        values = {
            f"{name}_{i}": value
            for i, row in enumerate(rows[:done])
            for name, value in _values(session_id, row).items()
        }
        bump = {"b_session": session_id, "b_now": now, "b_in": input_tokens, "b_out": output_tokens}
        if fence is None:
            bumped = _BUMP_AND_INSERT[done].rowcount(conn, {**bump, **values})
        else:
            params = {**fence.params(), **bump, **values}
            # The reply rides along only when no more rows follow: its id then comes after theirs
            # as it did when written on its own after them.
            carried = reply is not None and done == len(rows)
            if carried:
                assert reply is not None
                counts = _FENCED_WITH_REPLY[done].first(conn, {**params, **reply.params()})
            else:
                counts = _FENCED_BUMP_AND_INSERT[done].first(conn, params)
            assert counts is not None  # a SELECT of counts: always one row
            fence.verify(int(counts["fenced"]))
            bumped = int(counts["bumped"])
            if carried and bumped:
                assert reply is not None
                written = reply.row(int(counts["reply_id"]))
        if bumped == 0:
            raise SessionNotFound(session_id)
    else:
        if fence is not None:
            fence.check(conn)
        _bump(conn, session_id, now, input_tokens, output_tokens)
    for start in range(done, len(rows), _MANY):  # one statement: ids follow the rows' order
        chunk = rows[start : start + _MANY]
        if len(chunk) == 1:
            _INSERT.rowcount(conn, _values(session_id, chunk[0]))
            continue
        values = {
            f"{name}_{i}": value
            for i, row in enumerate(chunk)
            for name, value in _values(session_id, row).items()
        }
        _INSERT_ROWS[len(chunk)].rowcount(conn, values)
    if reply is not None and written is None:
        written = reply.add(conn)
    return written


def transcript(
    conn: Connection, session_id: str, *, after_id: int = 0, limit: int | None = None
) -> list[MessageRecord]:
    """A session's messages in order (optionally after an id, optionally at most `limit`)."""
    query = (
        select(messages)
        .where(messages.c.session_id == session_id, messages.c.id > after_id)
        .order_by(messages.c.id)
    )
    if limit is not None:
        query = query.limit(limit)
    return [MessageRecord.from_row(row) for row in conn.execute(query)]


def last_messages(conn: Connection, session_id: str, count: int) -> list[MessageRecord]:
    """The newest `count` messages of a session, oldest first."""
    return history_from(_LAST.all(conn, {"b_session": session_id, "b_count": count}))


def history_from(rows: Sequence[Mapping[str, Any]]) -> list[MessageRecord]:
    """`LAST_MESSAGES`'s rows as `last_messages` returns them: oldest first."""
    return [MessageRecord.from_mapping(row) for row in reversed(rows)]


def first_exchange_rows(
    conn: Connection, session_id: str, limit: int = 20
) -> list[tuple[str, str]]:
    """(role, content) of the session's first `limit` user and assistant messages with text."""
    rows = conn.execute(
        select(messages.c.role, messages.c.content)
        .where(
            messages.c.session_id == session_id,
            messages.c.role.in_(("user", "assistant")),
            messages.c.content.is_not(None),
        )
        .order_by(messages.c.id)
        .limit(limit)
    ).all()
    return [(str(row.role), str(row.content)) for row in rows]


def insert_imported(conn: Connection, session_id: str, rows: Sequence[dict[str, Any]]) -> None:
    """An imported session's messages as the export line holds them (counters come with the
    session row; the search index follows by trigger)."""
    if rows:
        conn.execute(insert(messages), [{**row, "session_id": session_id} for row in rows])


def trim_oldest(conn: Connection, session_id: str, count: int) -> int:
    """Delete the oldest `count` messages of a session that is being pruned; how many went."""
    oldest = (
        select(messages.c.id)
        .where(messages.c.session_id == session_id)
        .order_by(messages.c.id)
        .limit(count)
    )
    return int(conn.execute(delete(messages).where(messages.c.id.in_(oldest))).rowcount)
