"""The inbox: every turn recorded once (unique per platform event), in arrival order per key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    and_,
    bindparam,
    case,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)

from shared.db.prepared import Prepared
from shared.db.schema import inbox, routes
from shared.session_key import SessionKey
from shared.store.leases import ROUTE_FREE
from shared.turns import InboundTurn

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
_IS_OPEN = inbox.c.status.in_([literal_column(f"'{status}'") for status in OPEN_STATUSES])


@dataclass(frozen=True, slots=True)
class Recorded:
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

    @classmethod
    def from_row(cls, row: Row[Any]) -> TurnRow:
        return cls.from_mapping(row._mapping)

    @classmethod
    def from_mapping(cls, data: Mapping[Any, Any]) -> TurnRow:
        return cls(**{name: data[name] for name in _TURN_FIELDS if name in data})


_TURN_FIELDS = tuple(f.name for f in fields(TurnRow))

# Hot statements: built once, run on the driver's cursor (see prepared.py).
_FIND_EVENT = Prepared(
    select(inbox.c.id, inbox.c.session_key, inbox.c.seq).where(
        inbox.c.platform == bindparam("b_platform"), inbox.c.event_id == bindparam("b_event")
    )
)
# The arrival counter's bump also tells whether a drain holds the key right now.
_BUMP = (
    update(routes)
    .where(routes.c.session_key == bindparam("b_key"))
    .values(next_seq=routes.c.next_seq + 1, updated_at=bindparam("b_now"))
)
_BUMP_SEQ = Prepared(
    _BUMP.returning(routes.c.next_seq, routes.c.lease_holder, routes.c.lease_expires_at)
)
# The same, for a producer that will send the wake-up: it claims the sending (marks the key
# with this arrival's seq and time) unless a drain holds the lease or an earlier wake-up is
# still on its way. A wake-up is taken when a drain takes or lets go of the lease (leases.py
# clears the mark); one that was lost (the broker forgot it, its worker died) is trusted only
# for WAKE_PENDING_SECONDS, and redrive finds the turns meanwhile.
WAKE_PENDING_SECONDS = 30.0
_STALE = or_(routes.c.wake_sent_at.is_(None), routes.c.wake_sent_at <= bindparam("b_stale_before"))
_CLAIM = and_(ROUTE_FREE, _STALE)
_BUMP_SEQ_AND_CLAIM_WAKE = Prepared(
    _BUMP.values(
        wake_sent_at=case((_CLAIM, bindparam("b_now")), else_=routes.c.wake_sent_at),
        wake_seq=case((_CLAIM, routes.c.next_seq + 1), else_=routes.c.wake_seq),
    ).returning(
        routes.c.next_seq,
        routes.c.lease_holder,
        routes.c.lease_expires_at,
        routes.c.wake_sent_at,
        routes.c.wake_seq,
    )
)
_FORGET_WAKE = Prepared(
    update(routes)
    .where(routes.c.session_key == bindparam("b_key"))
    .where(routes.c.wake_seq == bindparam("b_seq"))
    .values(wake_sent_at=None)
)
_INSERT_ROUTE = insert(routes)
_TURN_COLUMNS = (
    "platform",
    "event_id",
    "session_key",
    "seq",
    "kind",
    "chat_id",
    "chat_type",
    "thread_id",
    "user_id",
    "user_name",
    "message_id",
    "reply_to",
    "text",
    "attachments",
    "status",
    "received_at",
)
_INSERT_TURN = Prepared(
    insert(inbox).values({name: bindparam(name) for name in _TURN_COLUMNS}).returning(inbox.c.id)
)
_NEXT_OPEN = Prepared(
    select(inbox)
    .where(inbox.c.session_key == bindparam("b_key"), _IS_OPEN)
    .order_by(inbox.c.seq)
    .limit(1)
)
_HAS_OPEN = select(inbox.c.id).where(inbox.c.session_key == bindparam("b_key"), _IS_OPEN).limit(1)
_GET_TURN = select(inbox).where(inbox.c.id == bindparam("b_id"))
_MARK_RUNNING = Prepared(
    update(inbox)
    .where(inbox.c.id == bindparam("b_id"))
    .values(
        status=RUNNING,
        attempts=inbox.c.attempts + 1,
        started_at=bindparam("b_now"),
        session_id=bindparam("b_session"),
        not_before=None,
    )
)
_FINISH = Prepared(
    update(inbox)
    .where(inbox.c.id == bindparam("b_id"))
    .values(
        status=bindparam("b_status"), finished_at=bindparam("b_now"), error=bindparam("b_error")
    )
)
_POSTPONE = (
    update(inbox)
    .where(inbox.c.id == bindparam("b_id"))
    .values(status=WAITING, not_before=bindparam("b_not_before"), error=bindparam("b_error"))
)


def find_event(conn: Connection, platform: str, event_id: str) -> Recorded | None:
    row = _FIND_EVENT.first(conn, {"b_platform": platform, "b_event": event_id})
    if row is None:
        return None
    return Recorded(row["id"], row["session_key"], row["seq"], duplicate=True)


@dataclass(frozen=True, slots=True)
class _Arrival:
    seq: int
    held: bool  # a drain holds the key's lease
    wake_pending: bool  # an earlier wake-up is still on its way


def _next_seq(
    conn: Connection, turn: InboundTurn, key: str, now: float, *, claim_wake: bool
) -> _Arrival:
    """Bump the key's arrival counter (creating its route row); the row lock orders arrivals.
    Also says whether a drain holds the key's lease at this moment, and with `claim_wake`
    whether a wake-up is already on its way (else marks the one the caller will send)."""
    if claim_wake:
        params = {"b_key": key, "b_now": now, "b_stale_before": now - WAKE_PENDING_SECONDS}
        route = _BUMP_SEQ_AND_CLAIM_WAKE.first(conn, params)
    else:
        route = _BUMP_SEQ.first(conn, {"b_key": key, "b_now": now})
    if route is not None:
        expires = route["lease_expires_at"]
        held = route["lease_holder"] is not None and expires is not None and expires > now
        seq = int(route["next_seq"])
        pending = claim_wake and not held and route["wake_sent_at"] is not None
        return _Arrival(seq, held, pending and route["wake_seq"] != seq)
    conn.execute(
        _INSERT_ROUTE,
        {
            "session_key": key,
            "platform": turn.platform,
            "chat_id": turn.chat_id,
            "chat_type": turn.chat_type,
            "thread_id": turn.thread_id,
            "user_id": turn.user_id,
            "next_seq": 1,
            "wake_sent_at": now if claim_wake else None,
            "wake_seq": 1 if claim_wake else None,
            "created_at": now,
            "updated_at": now,
        },
    )
    return _Arrival(1, held=False, wake_pending=False)


def record_turn(
    conn: Connection,
    turn: InboundTurn,
    key: SessionKey,
    *,
    now: float,
    kind: str = "message",
    claim_wake: bool = False,
) -> Recorded:
    """Record `turn` unless its event was seen before; call inside one write transaction.

    With `claim_wake` the caller promises to send a wake-up after commit unless the result
    says `lease_held` or `wake_pending`, and to call `forget_wake` if sending it fails."""
    seen = find_event(conn, turn.platform, turn.event_id)
    if seen is not None:
        return seen
    arrival = _next_seq(conn, turn, key.key, now, claim_wake=claim_wake)
    turn_id = _INSERT_TURN.scalar(
        conn,
        {
            "platform": turn.platform,
            "event_id": turn.event_id,
            "session_key": key.key,
            "seq": arrival.seq,
            "kind": kind,
            "chat_id": turn.chat_id,
            "chat_type": turn.chat_type,
            "thread_id": turn.thread_id,
            "user_id": turn.user_id,
            "user_name": turn.user_name if key.shared else None,
            "message_id": turn.message_id,
            "reply_to": turn.reply_to,
            "text": turn.text,
            "attachments": turn.attachments_json(),
            "status": WAITING,
            "received_at": now,
        },
    )
    return Recorded(
        int(turn_id),
        key.key,
        arrival.seq,
        duplicate=False,
        lease_held=arrival.held,
        wake_pending=arrival.wake_pending,
    )


def forget_wake(conn: Connection, key: str, seq: int) -> None:
    """The wake-up claimed by arrival `seq` could not be sent: let the next turn send one."""
    _FORGET_WAKE.rowcount(conn, {"b_key": key, "b_seq": seq})


def request_stop(conn: Connection, key: str, now: float) -> bool:
    """Ask the worker running `key`'s current turn to stop at its next model step."""
    result = conn.execute(
        update(routes).where(routes.c.session_key == key).values(stop_requested_at=now)
    )
    return result.rowcount > 0


def next_open_turn(conn: Connection, key: str) -> TurnRow | None:
    """The oldest turn of `key` not yet finished (a `running` one was left by a dead worker)."""
    row = _NEXT_OPEN.first(conn, {"b_key": key})
    return TurnRow.from_mapping(row) if row else None


def get_turn(conn: Connection, turn_id: int) -> TurnRow | None:
    row = conn.execute(_GET_TURN, {"b_id": turn_id}).first()
    return TurnRow.from_row(row) if row else None


def mark_running(conn: Connection, turn_id: int, session_id: str, now: float) -> None:
    _MARK_RUNNING.rowcount(conn, {"b_id": turn_id, "b_now": now, "b_session": session_id})


def finish_turn(
    conn: Connection, turn_id: int, status: str, now: float, error: str | None = None
) -> None:
    _FINISH.rowcount(conn, {"b_id": turn_id, "b_status": status, "b_now": now, "b_error": error})


def postpone_turn(conn: Connection, turn_id: int, not_before: float, error: str) -> None:
    """Put a failed attempt back in line, not to be retried before `not_before`."""
    conn.execute(_POSTPONE, {"b_id": turn_id, "b_not_before": not_before, "b_error": error})


def keys_needing_wake(conn: Connection, now: float, limit: int = 1000) -> list[str]:
    """Keys with open turns that are due and no live lease: their wake-up was lost."""
    query = (
        select(inbox.c.session_key)
        .join(routes, routes.c.session_key == inbox.c.session_key)
        .where(
            inbox.c.status.in_(OPEN_STATUSES),
            or_(inbox.c.not_before.is_(None), inbox.c.not_before <= now),
            or_(routes.c.lease_expires_at.is_(None), routes.c.lease_expires_at <= now),
        )
        .group_by(inbox.c.session_key)
        .order_by(func.min(inbox.c.received_at))
        .limit(limit)
    )
    return [str(key) for key in conn.execute(query).scalars()]


def has_open_turns(conn: Connection, key: str) -> bool:
    return conn.execute(_HAS_OPEN, {"b_key": key}).first() is not None


@dataclass(frozen=True, slots=True)
class InboxSummary:
    waiting: int
    running: int
    dead: int
    failed: int
    oldest_waiting_at: float | None
    leases_held: int


def summary(conn: Connection, now: float) -> InboxSummary:
    rows = conn.execute(
        select(inbox.c.status, func.count())
        .where(inbox.c.status.in_((WAITING, RUNNING, DEAD, FAILED)))
        .group_by(inbox.c.status)
    ).all()
    counts = {str(row[0]): int(row[1]) for row in rows}
    oldest = conn.execute(
        select(func.min(inbox.c.received_at)).where(inbox.c.status.in_(OPEN_STATUSES))
    ).scalar()
    held = conn.execute(
        select(func.count()).where(
            and_(routes.c.lease_holder.is_not(None), routes.c.lease_expires_at > now)
        )
    ).scalar_one()
    return InboxSummary(
        waiting=int(counts.get(WAITING, 0)),
        running=int(counts.get(RUNNING, 0)),
        dead=int(counts.get(DEAD, 0)),
        failed=int(counts.get(FAILED, 0)),
        oldest_waiting_at=float(oldest) if oldest is not None else None,
        leases_held=int(held),
    )


def dead_turns_after(conn: Connection, after_id: int, limit: int = 100) -> list[TurnRow]:
    rows = conn.execute(
        select(inbox)
        .where(inbox.c.status == DEAD, inbox.c.id > after_id)
        .order_by(inbox.c.id)
        .limit(limit)
    ).all()
    return [TurnRow.from_row(row) for row in rows]


@dataclass(frozen=True, slots=True)
class OpenTurns:
    """One platform's turns not yet finished."""

    waiting: int
    running: int
    oldest_received_at: float | None


def open_by_platform(conn: Connection) -> dict[str, OpenTurns]:
    """Waiting and running turns per platform and the oldest arrival among them: a scan of the
    open turns only (the partial index), cheap enough for every metrics scrape."""
    rows = conn.execute(
        select(inbox.c.platform, inbox.c.status, func.count(), func.min(inbox.c.received_at))
        .where(_IS_OPEN)
        .group_by(inbox.c.platform, inbox.c.status)
    ).all()
    found: dict[str, dict[str, Any]] = {}
    for platform, status, count, oldest in rows:
        entry = found.setdefault(str(platform), {WAITING: 0, RUNNING: 0, "oldest": None})
        entry[str(status)] = int(count)
        if oldest is not None and (entry["oldest"] is None or oldest < entry["oldest"]):
            entry["oldest"] = float(oldest)
    return {
        platform: OpenTurns(entry[WAITING], entry[RUNNING], entry["oldest"])
        for platform, entry in found.items()
    }
