"""Recording turns in the inbox: each platform event once (unique per platform and event id),
numbered in arrival order per key by its route's counter, alone or in a receiver's batch.

The inbox's other writes (claiming, finishing, postponing) are `inbox`'s, which re-exports
these: callers keep using `inbox.record_turn` and the like.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy import Connection, bindparam, cast, literal, select, true
from sqlalchemy.dialects import postgresql

from shared.db.conflict import InsertOrSkip
from shared.db.prepared import Prepared
from shared.db.schema import inbox
from shared.pipeline import routes
from shared.pipeline.inbox_report import find_events
from shared.pipeline.turn_rows import WAITING, Recorded
from shared.session_key import SessionKey
from shared.turns import InboundTurn

# Hot statements: built once, run on the driver's cursor (see shared/db/prepared.py).
_FIND_EVENT = Prepared(
    select(inbox.c.id, inbox.c.session_key, inbox.c.seq).where(
        inbox.c.platform == bindparam("b_platform"), inbox.c.event_id == bindparam("b_event")
    )
)
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
    "flush_session_id",
)
# One event delivered twice at once (a platform's retry, two receivers) may race past
# `find_event` on PostgreSQL: the second insert is skipped and it answers as a redelivery.
_INSERT_TURN = InsertOrSkip(
    inbox,
    _TURN_COLUMNS,
    ["platform", "event_id"],
    [inbox.c.id, inbox.c.platform, inbox.c.event_id],
)


def find_event(conn: Connection, platform: str, event_id: str) -> Recorded | None:
    row = _FIND_EVENT.first(conn, {"b_platform": platform, "b_event": event_id})
    if row is None:
        return None
    return Recorded(row["id"], row["session_key"], row["seq"], duplicate=True)


class Arriving(NamedTuple):
    """A turn for `record_turns`: its session key, kind and arrival time."""

    turn: InboundTurn
    key: SessionKey
    kind: str
    now: float


def record_turns(
    conn: Connection, arriving: Sequence[Arriving], *, claim_wake: bool = False
) -> list[Recorded]:
    """`record_turn` for each of `arriving` in order, inside one write transaction, with the
    same results (a later delivery of an event in the batch is its redelivery), in fewer
    statements: the batch's events are looked up in one, its new turns inserted in one, and
    only the arrival counters are bumped turn by turn, in order (that bump orders a key's
    turns; on PostgreSQL they go in one round trip, on SQLite in one statement when the batch's
    keys all differ: routes.bump_arrivals).
    Raises what a statement raised; the caller rolls back (the batch is one unit of work)."""
    by_platform: dict[str, list[str]] = {}
    for item in arriving:
        by_platform.setdefault(item.turn.platform, []).append(item.turn.event_id)
    seen: dict[tuple[str, str], Recorded] = {}
    for platform, event_ids in by_platform.items():
        for row in find_events(conn, platform, event_ids):
            seen[(platform, row["event_id"])] = Recorded(
                row["id"], row["session_key"], row["seq"], duplicate=True
            )
    first: dict[tuple[str, str], int] = {}  # an event new to the inbox → its place in the batch
    for index, item in enumerate(arriving):
        event = (item.turn.platform, item.turn.event_id)
        if event not in seen and event not in first:
            first[event] = index
    new = [arriving[index] for index in first.values()]
    bumped = routes.bump_arrivals(
        conn,
        [(item.key.key, _place(item.turn), item.now) for item in new],
        claim_wake=claim_wake,
    )
    arrivals = dict(zip(first.values(), bumped, strict=True))
    rows = [
        _turn_values(item.turn, item.key, arrival.seq, item.kind, item.now, None)
        for item, arrival in zip(new, bumped, strict=True)
    ]
    inserted = {
        (row["platform"], row["event_id"]): int(row["id"]) for row in _INSERT_TURN.many(conn, rows)
    }
    results: dict[tuple[str, str], Recorded] = {}
    for event, index in first.items():
        turn_id = inserted.get(event)
        if turn_id is None:  # recorded meanwhile by another transaction (see record_turn)
            found = find_event(conn, *event)
            if found is None:  # pragma: no cover - the row that stopped our insert is there
                raise RuntimeError(f"event {event[1]} neither recorded nor found")
            results[event] = found
            continue
        arrival = arrivals[index]
        results[event] = Recorded(
            turn_id,
            arriving[index].key.key,
            arrival.seq,
            duplicate=False,
            lease_held=arrival.held,
            wake_pending=arrival.wake_pending,
        )
    out: list[Recorded] = []
    for index, item in enumerate(arriving):
        event = (item.turn.platform, item.turn.event_id)
        if event in seen:
            out.append(seen[event])
        elif first[event] == index:
            out.append(results[event])
        else:  # a second delivery in the same batch: a redelivery of the first
            done = results[event]
            out.append(Recorded(done.turn_id, done.session_key, done.seq, duplicate=True))
    return out


def _place(turn: InboundTurn) -> routes.Place:
    return routes.Place(turn.platform, turn.chat_id, turn.chat_type, turn.thread_id, turn.user_id)


def _turn_row(
    turn: InboundTurn,
    key: SessionKey,
    seq: int,
    kind: str,
    now: float,
    flush_session_id: str | None,
) -> dict[str, Any]:
    values = _turn_values(turn, key, seq, kind, now, flush_session_id)
    return dict(zip(_TURN_COLUMNS, values, strict=True))


def _turn_values(
    turn: InboundTurn,
    key: SessionKey,
    seq: int,
    kind: str,
    now: float,
    flush_session_id: str | None,
) -> list[Any]:
    """A turn's inbox row, its values in _TURN_COLUMNS order (a batch's multi-row INSERT
    binds them so, without a dict per row)."""
    return [
        turn.platform,
        turn.event_id,
        key.key,
        seq,
        kind,
        turn.chat_id,
        turn.chat_type,
        turn.thread_id,
        turn.user_id,
        turn.user_name if key.shared else None,
        turn.message_id,
        turn.reply_to,
        turn.text,
        turn.attachments_json(),
        WAITING,
        now,
        flush_session_id,
    ]


def _record_in_one(claim_wake: bool) -> Prepared:
    """PostgreSQL: `find_event`, the bump of the key's route unless the event was seen, and the
    turn's insert (skipped on a taken event) once the bump found the route, as one statement;
    its one row says which happened. The turn's values are bound as `t_<column>`."""
    seen = (
        select(inbox.c.id, inbox.c.session_key, inbox.c.seq)
        .where(inbox.c.platform == bindparam("t_platform"))
        .where(inbox.c.event_id == bindparam("t_event_id"))
        .cte("seen")
    )
    bumped = routes.bump_unless(seen, claim_wake=claim_wake).cte("bumped")
    values = select(
        *[
            bumped.c.next_seq if c == "seq" else cast(bindparam(f"t_{c}"), inbox.c[c].type)
            for c in _TURN_COLUMNS
        ]
    ).select_from(bumped)
    recorded = (
        postgresql.insert(inbox)
        .from_select(_TURN_COLUMNS, values)
        .on_conflict_do_nothing(index_elements=["platform", "event_id"])
        .returning(inbox.c.id)
        .cte("recorded")
    )
    one = select(literal(1).label("one")).subquery("one")
    return Prepared(
        select(
            seen.c.id.label("seen_id"),
            seen.c.session_key.label("seen_key"),
            seen.c.seq.label("seen_seq"),
            *[c for c in bumped.c],
            recorded.c.id.label("turn_id"),
        ).select_from(
            one.outerjoin(seen, true()).outerjoin(bumped, true()).outerjoin(recorded, true())
        ),
        dialect="postgresql",
    )


_RECORD_IN_ONE = {claim: _record_in_one(claim) for claim in (False, True)}


def _record_existing_key(
    conn: Connection, row: dict[str, Any], key: SessionKey, now: float, claim_wake: bool
) -> Recorded | Alone:
    """PostgreSQL: record a turn in one statement when its key has a route, else say why not
    (Alone.UNROUTED: nothing was written, the caller takes the first arrival's path)."""
    params = {f"t_{c}": v for c, v in row.items() if c != "seq"}
    params.update(routes.bump_params(key.key, now, claim_wake))
    found = _RECORD_IN_ONE[claim_wake].first(conn, params)
    assert found is not None  # one row, always: the outer joins keep it
    if found["seen_id"] is not None:
        return Recorded(found["seen_id"], found["seen_key"], found["seen_seq"], duplicate=True)
    if found["next_seq"] is None:
        return Alone.UNROUTED
    if found["turn_id"] is None:  # recorded meanwhile by another transaction (see record_turn)
        return Alone.TAKEN
    return _new_turn(int(found["turn_id"]), key, routes.arrival_from(found, now, claim_wake))


class Alone(enum.Enum):
    """Why `record_turn_alone` did not record its turn (`record_turn` must, in a transaction)."""

    UNROUTED = "unrouted"  # the key has no route yet: nothing was written
    TAKEN = "taken"  # another transaction recorded the event meanwhile (the key's counter moved)


def record_turn_alone(
    conn: Connection,
    turn: InboundTurn,
    key: SessionKey,
    *,
    now: float,
    kind: str = "message",
    claim_wake: bool = False,
) -> Recorded | Alone:
    """PostgreSQL: `record_turn` as exactly one statement, for a unit of work that is that
    statement alone (Store.commit_alone: no BEGIN … COMMIT around it): the event's lookup,
    the bump of the key's route and the turn's insert. Returns the turn recorded (or found:
    a redelivery), else why not: then `record_turn` records it in a transaction, as a key's
    first turn always was (told `unrouted` when that was why).

    Safe to run twice (commit_alone runs it again when its connection died, perhaps after it
    committed): the second run finds the event the first recorded, and answers as for a
    redelivery. Two runs at once (the first still running on a backend that lost its client)
    are two deliveries of one event at once: the unique (platform, event_id) lets one insert."""
    return _record_existing_key(
        conn, _turn_row(turn, key, 0, kind, now, None), key, now, claim_wake
    )


def _new_turn(turn_id: int, key: SessionKey, arrival: routes.Arrival) -> Recorded:
    return Recorded(
        turn_id,
        key.key,
        arrival.seq,
        duplicate=False,
        lease_held=arrival.held,
        wake_pending=arrival.wake_pending,
    )


def _recorded_meanwhile(conn: Connection, platform: str, event_id: str) -> Recorded:
    """The turn another transaction recorded for this event while ours tried to."""
    seen = find_event(conn, platform, event_id)
    if seen is None:  # pragma: no cover - the row that stopped our insert is there
        raise RuntimeError(f"event {event_id} neither recorded nor found")
    return seen


def record_turn(
    conn: Connection,
    turn: InboundTurn,
    key: SessionKey,
    *,
    now: float,
    kind: str = "message",
    claim_wake: bool = False,
    flush_session_id: str | None = None,
    unrouted: bool = False,
) -> Recorded:
    """Record `turn` unless its event was seen before; call inside one write transaction.

    With `claim_wake` the caller promises to send a wake-up after commit unless the result
    says `lease_held` or `wake_pending`, and to call `forget_wake` if sending it fails.

    `unrouted` (PostgreSQL): `record_turn_alone` has just found neither the event nor the key's
    route, so this goes straight to the key's first arrival. Whatever changed since is what
    could change inside one transaction too (READ COMMITTED): a route made meanwhile is
    bumped after all (routes.bump_arrival), an event recorded meanwhile stops the insert and
    is found (as below)."""
    unrouted = unrouted and conn.dialect.name == "postgresql"
    if conn.dialect.name == "postgresql" and not unrouted:  # a key with a route: one round trip
        row = _turn_row(turn, key, 0, kind, now, flush_session_id)
        done = _record_existing_key(conn, row, key, now, claim_wake)
        if done is Alone.TAKEN:  # recorded meanwhile by another transaction (see below)
            return _recorded_meanwhile(conn, turn.platform, turn.event_id)
        if isinstance(done, Recorded):
            return done
    elif not unrouted:  # (on PostgreSQL that statement found no such event)
        seen = find_event(conn, turn.platform, turn.event_id)
        if seen is not None:
            return seen
    arrival = routes.bump_arrival(
        conn, key.key, _place(turn), now, claim_wake=claim_wake, unrouted=unrouted
    )
    inserted = _INSERT_TURN.first(
        conn, _turn_row(turn, key, arrival.seq, kind, now, flush_session_id)
    )
    if inserted is None:  # recorded meanwhile by another transaction (its arrival number
        return _recorded_meanwhile(conn, turn.platform, turn.event_id)  # is the turn's)
    return _new_turn(int(inserted["id"]), key, arrival)
