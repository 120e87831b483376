"""The shape of a slash command handler."""

from __future__ import annotations

from collections.abc import Callable

from shared.db import Connection
from shared.pipeline import inbox, outbox
from shared.pipeline.inbox import TurnRow
from workers.runtime import Runtime

# (connection inside the fenced write, runtime, the command's turn, session id, args) → reply.
# A handler runs inside the turn's outcome transaction: whatever it writes commits with it.
Handler = Callable[[Connection, Runtime, TurnRow, str, str], str]


def answer_rows(conn: Connection, turn: TurnRow, session_id: str, reply: str, now: float) -> None:
    """A command's answer and its turn's status, written in the caller's fenced transaction."""
    outbox.add(
        conn,
        platform=turn.platform,
        chat_id=turn.chat_id,
        thread_id=turn.thread_id,
        reply_to=turn.message_id,
        turn_id=turn.id,
        session_id=session_id,
        text=reply,
        now=now,
    )
    inbox.finish_turn(conn, turn.id, inbox.DONE, now)
