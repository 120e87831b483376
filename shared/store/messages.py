"""Message rows: append with the session's activity and token counters, read a transcript."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, case, insert, select, update

from shared.model import MessageRecord
from shared.store.errors import SessionNotFound
from shared.store.schema import messages, sessions


def encode_tool_calls(tool_calls: Sequence[dict[str, Any]] | str | None) -> str | None:
    if tool_calls is None or isinstance(tool_calls, str):
        return tool_calls
    return json.dumps(list(tool_calls), ensure_ascii=False, separators=(",", ":"))


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
    bumped = conn.execute(
        update(sessions)
        .where(sessions.c.id == session_id)
        .values(
            last_active_at=case(
                (sessions.c.last_active_at < now, now), else_=sessions.c.last_active_at
            ),
            input_tokens=sessions.c.input_tokens + input_tokens,
            output_tokens=sessions.c.output_tokens + output_tokens,
        )
    )
    if bumped.rowcount == 0:
        raise SessionNotFound(session_id)
    result = conn.execute(
        insert(messages).values(
            session_id=session_id,
            role=role,
            content=content,
            tool_calls=encode_tool_calls(tool_calls),
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            token_count=token_count,
            timestamp=now,
            platform_message_id=platform_message_id,
        )
    )
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


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
    rows = conn.execute(
        select(messages)
        .where(messages.c.session_id == session_id)
        .order_by(messages.c.id.desc())
        .limit(count)
    ).all()
    return [MessageRecord.from_row(row) for row in reversed(rows)]
