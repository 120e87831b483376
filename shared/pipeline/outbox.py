"""The outbox: replies written with the turn's outcome, sent in order per chat lane."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    bindparam,
    cast,
    exists,
    func,
    insert,
    or_,
    select,
    true,
    update,
)

from shared.db.prepared import Prepared
from shared.db.schema import outbox
from shared.pipeline import leases
from shared.pipeline.leases import Lease

PENDING = "pending"
SENT = "sent"
FAILED = "failed"


def lane_for(platform: str, chat_id: str) -> str:
    """One lane per chat: replies to a chat (threads included) leave in the order written."""
    return f"{platform}:{chat_id}"


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: int
    lane: str
    platform: str
    chat_id: str
    text: str
    status: str
    attempts: int
    created_at: float
    turn_id: int | None = None
    session_id: str | None = None
    thread_id: str | None = None
    reply_to: str | None = None
    not_before: float | None = None
    platform_message_id: str | None = None
    error: str | None = None
    sent_at: float | None = None

    @classmethod
    def from_row(cls, row: Row[Any]) -> OutboxRow:
        return cls.from_mapping(row._mapping)

    @classmethod
    def from_mapping(cls, data: Mapping[Any, Any]) -> OutboxRow:
        return cls(**{name: data[name] for name in _ROW_FIELDS if name in data})


_ROW_FIELDS = tuple(f.name for f in fields(OutboxRow))

# Hot statements: built once, run on the driver's cursor (see shared/db/prepared.py).
_ADD_COLUMNS = (
    "lane",
    "turn_id",
    "session_id",
    "platform",
    "chat_id",
    "thread_id",
    "reply_to",
    "text",
    "status",
    "created_at",
)
_ADD = Prepared(
    insert(outbox).values({name: bindparam(name) for name in _ADD_COLUMNS}).returning(outbox.c.id)
)
_ADD_DELIVERED = Prepared(
    insert(outbox)
    .values({name: bindparam(name) for name in (*_ADD_COLUMNS, "sent_at", "attempts")})
    .returning(outbox.c.id)
)
_PENDING = Prepared(
    select(outbox)
    .where(outbox.c.lane == bindparam("b_lane"), outbox.c.status == PENDING)
    .order_by(outbox.c.id)
    .limit(bindparam("b_limit"))
)
_SENT_ROW = (
    update(outbox)
    .where(outbox.c.id == bindparam("b_id"))
    .values(
        status=SENT,
        platform_message_id=bindparam("b_message_id"),
        sent_at=bindparam("b_now"),
        attempts=outbox.c.attempts + 1,
    )
)
_MARK_SENT = Prepared(_SENT_ROW)


def _sent_and_next() -> Prepared:
    """PostgreSQL: `leases.check_named`, `mark_sent`, `pending` and, when nothing is pending,
    `leases.release_named`, as one statement, a transaction of its own. Its sub-statements share
    one snapshot, in which the row being marked is still pending: the look leaves it out by id.
    Its first column, `fenced`, is 0 when the fence moved (then it changed nothing); each row
    after that is a pending one (none: a row of nulls beside `fenced`)."""
    following = (
        select(outbox)
        .where(
            outbox.c.lane == bindparam("b_lane"),
            outbox.c.status == PENDING,
            outbox.c.id != bindparam("b_id"),
        )
        .order_by(outbox.c.id)
        .limit(bindparam("b_limit"))
        .cte("following")
    )
    fenced = leases.checked_or_released_unless(following).cte("fenced")
    sent = _SENT_ROW.where(exists(select(1).select_from(fenced))).returning(outbox.c.id).cte("sent")
    head = select(func.count().label("fenced")).select_from(fenced).cte("head")
    return Prepared(
        select(head.c.fenced, following)
        .select_from(head.outerjoin(following, true()))
        .order_by(following.c.id)
        .add_cte(sent),
        dialect="postgresql",
    )


_SENT_AND_NEXT = _sent_and_next()
_MARK_RETRY = (
    update(outbox)
    .where(outbox.c.id == bindparam("b_id"))
    .values(
        not_before=bindparam("b_not_before"),
        error=bindparam("b_error"),
        attempts=outbox.c.attempts + bindparam("b_count"),
    )
)
_ATTEMPTS = select(outbox.c.attempts).where(outbox.c.id == bindparam("b_id"))
_MARK_FAILED = (
    update(outbox)
    .where(outbox.c.id == bindparam("b_id"))
    .values(
        status=FAILED,
        error=bindparam("b_error"),
        sent_at=bindparam("b_now"),
        attempts=outbox.c.attempts + 1,
    )
)


def add(
    conn: Connection,
    *,
    platform: str,
    chat_id: str,
    text: str,
    now: float,
    turn_id: int | None = None,
    session_id: str | None = None,
    thread_id: str | None = None,
    reply_to: str | None = None,
    delivered: bool = False,
) -> OutboxRow:
    """A reply to send, in its chat's lane; `delivered`: one its reader takes from the store
    (the terminal), written as sent, since committing it is what delivers it."""
    return Reply(
        platform=platform,
        chat_id=chat_id,
        text=text,
        now=now,
        turn_id=turn_id,
        session_id=session_id,
        thread_id=thread_id,
        reply_to=reply_to,
        delivered=delivered,
    ).add(conn)


# Every column a reply is written with: a pending one's sent_at is NULL and attempts 0, as the
# table's defaults would leave them, so one statement writes either kind.
_REPLY_COLUMNS = (*_ADD_COLUMNS, "sent_at", "attempts")


@dataclass(frozen=True, slots=True)
class Reply:
    """A reply `add` writes, for a statement of another store module to carry on PostgreSQL
    (`insert_once` in its WITH, bound with `params()`; `row` with the id it returned), saving
    the reply's round trip: the turn's outcome writes it with the turn's messages."""

    platform: str
    chat_id: str
    text: str
    now: float
    turn_id: int | None = None
    session_id: str | None = None
    thread_id: str | None = None
    reply_to: str | None = None
    delivered: bool = False

    def values(self) -> dict[str, Any]:
        values: dict[str, Any] = {
            "lane": lane_for(self.platform, self.chat_id),
            "turn_id": self.turn_id,
            "session_id": self.session_id,
            "platform": self.platform,
            "chat_id": self.chat_id,
            "thread_id": self.thread_id,
            "reply_to": self.reply_to,
            "text": self.text,
            "status": PENDING,
            "created_at": self.now,
        }
        if self.delivered:
            values.update(status=SENT, sent_at=self.now, attempts=1)
        return values

    def add(self, conn: Connection) -> OutboxRow:
        """The reply in a statement of its own (`add`)."""
        values = self.values()
        if self.delivered:
            row_id = _ADD_DELIVERED.scalar(conn, values)
        else:
            row_id = _ADD.scalar(conn, values)
        return self.row(int(row_id))

    def params(self) -> dict[str, Any]:
        """`insert_once`'s binds (`o_<column>`)."""
        values = self.values()
        return {f"o_{c}": values.get(c, None if c == "sent_at" else 0) for c in _REPLY_COLUMNS}

    def row(self, row_id: int) -> OutboxRow:
        values = self.values()
        values.setdefault("attempts", 0)
        return OutboxRow.from_mapping({**values, "id": row_id})


def insert_once(found: Any, name: str = "reply") -> Any:
    """PostgreSQL: a `Reply`'s INSERT (its binds `o_<column>`, as `Reply.params`) as a CTE that
    writes the row only once `found` (a CTE) has a row, returning its id."""
    source = select(
        *[cast(bindparam(f"o_{c}"), outbox.c[c].type).label(c) for c in _REPLY_COLUMNS]
    ).where(exists(select(1).select_from(found)))
    return insert(outbox).from_select(_REPLY_COLUMNS, source).returning(outbox.c.id).cte(name)


def pending(conn: Connection, lane: str, limit: int = 20) -> list[OutboxRow]:
    """The lane's unsent rows in write order (the first one blocks the rest: order per chat)."""
    rows = _PENDING.all(conn, {"b_lane": lane, "b_limit": limit})
    return [OutboxRow.from_mapping(row) for row in rows]


def mark_sent(conn: Connection, row_id: int, platform_message_id: str | None, now: float) -> None:
    _MARK_SENT.rowcount(conn, {"b_id": row_id, "b_message_id": platform_message_id, "b_now": now})


def mark_sent_and_next(
    conn: Connection,
    row_id: int,
    platform_message_id: str | None,
    now: float,
    lease: Lease,
    lane: str,
    limit: int,
    ttl: float,
) -> list[OutboxRow]:
    """Under the lane's lease (`leases.check_named`, extending it by `ttl`; LeaseLost when the
    fence moved, and nothing is written): mark `row_id` sent, and return the lane's next pending
    rows or, when there are none, let the lease go. On PostgreSQL one statement, needing no
    transaction around it (`Store.commit_alone`): run twice, it finds the row sent and the lane
    as the first run left it."""
    if conn.dialect.name != "postgresql":
        leases.check_named(conn, lease, now, ttl)
        mark_sent(conn, row_id, platform_message_id, now)
        rows = pending(conn, lane, limit=limit)
        if not rows:
            leases.release_named(conn, lease)
        return rows
    params = {
        "b_id": row_id,
        "b_message_id": platform_message_id,
        "b_now": now,
        "b_lane": lane,
        "b_limit": limit,
        "b_name": lease.name,
        "b_fence": lease.fence,
        "b_expires": now + ttl,
    }
    found = _SENT_AND_NEXT.all(conn, params)
    if not found[0]["fenced"]:
        raise leases.LeaseLost(f"lease on {lease.name} moved past fence {lease.fence}")
    return [OutboxRow.from_mapping(row) for row in found if row["id"] is not None]


def mark_retry(
    conn: Connection, row_id: int, not_before: float, error: str, *, failed: bool = True
) -> int:
    """Put a row off until `not_before`; a failed attempt counts, a platform's "wait" does not.
    Returns the attempts so far."""
    conn.execute(
        _MARK_RETRY,
        {"b_id": row_id, "b_not_before": not_before, "b_error": error, "b_count": int(failed)},
    )
    return int(conn.execute(_ATTEMPTS, {"b_id": row_id}).scalar_one())


def mark_failed(conn: Connection, row_id: int, error: str, now: float) -> None:
    conn.execute(_MARK_FAILED, {"b_id": row_id, "b_error": error, "b_now": now})


def lanes_with_pending(conn: Connection, now: float, limit: int = 1000) -> list[str]:
    rows = conn.execute(
        select(outbox.c.lane)
        .where(
            outbox.c.status == PENDING,
            or_(outbox.c.not_before.is_(None), outbox.c.not_before <= now),
        )
        .group_by(outbox.c.lane)
        .order_by(func.min(outbox.c.id))
        .limit(limit)
    ).scalars()
    return [str(lane) for lane in rows]


def for_turn(conn: Connection, turn_id: int) -> list[OutboxRow]:
    rows = conn.execute(select(outbox).where(outbox.c.turn_id == turn_id).order_by(outbox.c.id))
    return [OutboxRow.from_row(row) for row in rows]


def pending_count(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).where(outbox.c.status == PENDING)).scalar_one())


def pending_by_platform(conn: Connection) -> dict[str, int]:
    """Replies waiting to be sent, per platform (the metrics' outbox backlog)."""
    rows = conn.execute(
        select(outbox.c.platform, func.count())
        .where(outbox.c.status == PENDING)
        .group_by(outbox.c.platform)
    ).all()
    return {str(platform): int(count) for platform, count in rows}


def move_chat(conn: Connection, platform: str, old: str, new: str) -> int:
    """Pending replies to `platform` chat `old` go to chat `new`, in its lane (the chat changed
    its id); how many moved."""
    return int(
        conn.execute(
            update(outbox)
            .where(
                outbox.c.platform == platform, outbox.c.chat_id == old, outbox.c.status == PENDING
            )
            .values(chat_id=new, lane=lane_for(platform, new))
        ).rowcount
    )


def get_row(conn: Connection, row_id: int) -> OutboxRow | None:
    found = conn.execute(select(outbox).where(outbox.c.id == row_id)).first()
    return OutboxRow.from_row(found) if found is not None else None
