"""The inbox's row shapes: a turn's statuses, `TurnRow` as a turn reads back and `Recorded` as
recording one answers; the rows themselves are written by `shared.pipeline.inbox` alone."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

from sqlalchemy import Row, literal_column

from shared.db.schema import inbox, sessions
from shared.model import SessionRecord

WAITING = "waiting"
RUNNING = "running"
DONE = "done"
FAILED = "failed"
DEAD = "dead"
CANCELLED = "cancelled"
OPEN_STATUSES = (WAITING, RUNNING)

# The open statuses are written into the SQL, not bound: SQLite uses the partial index
# ix_inbox_open (WHERE status IN ('waiting', 'running')) only when it can see the values, and
# otherwise walks every turn the key ever had.
IS_OPEN = inbox.c.status.in_([literal_column(f"'{status}'") for status in OPEN_STATUSES])


class Recorded(NamedTuple):
    turn_id: int
    session_key: str
    seq: int
    duplicate: bool
    # A drain held the key's lease when the turn was recorded: it finds the turn before it lets
    # go (it looks for the next turn and releases in one write), so no wake-up is needed.
    lease_held: bool = False
    # A wake-up sent for an earlier turn is still on its way (no drain has taken the lease
    # since): the drain it starts finds this turn too, so no second wake-up is needed.
    wake_pending: bool = False


@dataclass(frozen=True, slots=True)
class TurnRow:
    id: int
    platform: str
    event_id: str
    session_key: str
    seq: int
    kind: str
    chat_id: str
    chat_type: str
    text: str
    status: str
    attempts: int
    received_at: float
    thread_id: str | None = None
    user_id: str | None = None
    user_name: str | None = None
    message_id: str | None = None
    reply_to: str | None = None
    attachments: str | None = None
    not_before: float | None = None
    session_id: str | None = None
    error: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    flush_session_id: str | None = None  # a memory-flush turn: the session it was queued for

    @classmethod
    def from_row(cls, row: Row[Any]) -> TurnRow:
        return cls.from_mapping(row._mapping)

    @classmethod
    def from_mapping(cls, data: Mapping[Any, Any]) -> TurnRow:
        return cls(**{name: data[name] for name in _TURN_FIELDS if name in data})


_TURN_FIELDS = tuple(f.name for f in fields(TurnRow))


# The rest of the route's session's row, for a statement that reads it along (`live_session`).
LIVE_SESSION_COLUMNS = tuple(
    sessions.c[f.name].label(f"live_{f.name}") for f in fields(SessionRecord) if f.name != "id"
)
_LIVE_FIELDS = tuple(c.element for c in LIVE_SESSION_COLUMNS)


def live_session(state: Mapping[str, Any]) -> SessionRecord | None:
    """The route's session as a row read with `route_sessions.SESSION_STATE_COLUMNS` and
    `LIVE_SESSION_COLUMNS` holds it (None when the route points at none)."""
    if state["live_id"] is None:
        return None
    return SessionRecord.from_mapping(
        {"id": state["live_id"], **{c.name: state[f"live_{c.name}"] for c in _LIVE_FIELDS}}
    )
