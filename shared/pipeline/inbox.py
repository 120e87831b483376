"""The inbox: every turn recorded once (unique per platform event), in arrival order per key.

This module and `inbox_record` alone write the inbox: recording is `inbox_record`'s; claiming,
finishing and postponing turns are this module's. The row shapes and statuses are `turn_rows`,
the sweeps' and monitors' reads `inbox_report`; all three are re-exported here, so callers keep
using `inbox.record_turn`, `inbox.TurnRow`, `inbox.summary` and the like.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    Connection,
    bindparam,
    exists,
    func,
    literal_column,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import aggregate_order_by

from shared.db.prepared import Prepared
from shared.db.schema import inbox
from shared.db.schema import messages as messages_table
from shared.db.schema import routes as routes_table
from shared.model import MessageRecord
from shared.pipeline import route_sessions, routes
from shared.pipeline.inbox_record import Alone as Alone
from shared.pipeline.inbox_record import Arriving as Arriving
from shared.pipeline.inbox_record import find_event as find_event
from shared.pipeline.inbox_record import record_turn as record_turn
from shared.pipeline.inbox_record import record_turn_alone as record_turn_alone
from shared.pipeline.inbox_record import record_turns as record_turns
from shared.pipeline.inbox_report import InboxSummary as InboxSummary
from shared.pipeline.inbox_report import OpenTurns as OpenTurns
from shared.pipeline.inbox_report import cancelled_before as cancelled_before
from shared.pipeline.inbox_report import dead_turns_after as dead_turns_after
from shared.pipeline.inbox_report import get_turn as get_turn
from shared.pipeline.inbox_report import has_open_turns as has_open_turns
from shared.pipeline.inbox_report import keys_needing_wake as keys_needing_wake
from shared.pipeline.inbox_report import open_by_platform as open_by_platform
from shared.pipeline.inbox_report import summary as summary
from shared.pipeline.leases import Lease
from shared.pipeline.turn_rows import CANCELLED as CANCELLED
from shared.pipeline.turn_rows import DEAD as DEAD
from shared.pipeline.turn_rows import DONE as DONE
from shared.pipeline.turn_rows import FAILED as FAILED
from shared.pipeline.turn_rows import IS_OPEN, LIVE_SESSION_COLUMNS
from shared.pipeline.turn_rows import OPEN_STATUSES as OPEN_STATUSES
from shared.pipeline.turn_rows import RUNNING as RUNNING
from shared.pipeline.turn_rows import WAITING as WAITING
from shared.pipeline.turn_rows import Recorded as Recorded
from shared.pipeline.turn_rows import TurnRow as TurnRow
from shared.pipeline.turn_rows import live_session as live_session
from shared.store import messages as message_rows
from shared.store import usage
from shared.store.housekeeping import MEMORY_FLUSH

# Hot statements: built once, run on the driver's cursor (see shared/db/prepared.py).
_NEXT_OPEN = Prepared(
    select(inbox)
    .where(inbox.c.session_key == bindparam("b_key"), IS_OPEN)
    .order_by(inbox.c.seq)
    .limit(1)
)
# PostgreSQL: the next open turn with its route's session state
# (`route_sessions.session_state`), read together: the drain needs both to claim it, and each is
# a round trip there.
_NEXT_OPEN_WITH_ROUTE = (
    select(
        inbox,
        routes_table.c.session_key.label("route_key"),
        *route_sessions.SESSION_STATE_COLUMNS,
        *LIVE_SESSION_COLUMNS,
    )
    .select_from(
        inbox.outerjoin(
            route_sessions.SESSION_STATE_FROM, routes_table.c.session_key == inbox.c.session_key
        )
    )
    .where(inbox.c.session_key == bindparam("b_key"), IS_OPEN)
    .order_by(inbox.c.seq)
    .limit(1)
)


def _running(session: Any) -> dict[str, Any]:
    """A claimed turn's values: running (one attempt more) in `session`, since `b_now`."""
    return {
        "status": RUNNING,
        "attempts": inbox.c.attempts + 1,
        "started_at": bindparam("b_now"),
        "session_id": session,
        "not_before": None,
    }


_RUNNING = (
    update(inbox).where(inbox.c.id == bindparam("b_id")).values(_running(bindparam("b_session")))
)
_MARK_RUNNING = Prepared(_RUNNING)
_FINISHED = (
    update(inbox)
    .where(inbox.c.id == bindparam("b_id"))
    .values(
        status=bindparam("b_status"), finished_at=bindparam("b_now"), error=bindparam("b_error")
    )
)
_FINISH = Prepared(_FINISHED)
_POSTPONE = (
    update(inbox)
    .where(inbox.c.id == bindparam("b_id"))
    .values(status=WAITING, not_before=bindparam("b_not_before"), error=bindparam("b_error"))
)


def move_chat(conn: Connection, platform: str, old: str, new: str) -> int:
    """Open turns of `platform` chat `old` now belong to chat `new` (the chat changed its id);
    how many moved."""
    return int(
        conn.execute(
            update(inbox)
            .where(inbox.c.platform == platform, inbox.c.chat_id == old, IS_OPEN)
            .values(chat_id=new)
        ).rowcount
    )


def next_open_turn(conn: Connection, key: str) -> TurnRow | None:
    """The oldest turn of `key` not yet finished (a `running` one was left by a dead worker)."""
    row = _NEXT_OPEN.first(conn, {"b_key": key})
    return TurnRow.from_mapping(row) if row else None


@lru_cache(maxsize=64)
def _finish_and_next(usage_shape: tuple[int, int, int, int] | None = None) -> Prepared:
    """PostgreSQL: `finish_turn`, `next_open_turn` and, when no turn is open, `release_route`,
    as one statement. Its sub-statements share one snapshot, in which the turn being finished
    is still open: the search leaves it out by id. `usage_shape`: the turn's usage rows of that
    shape (`usage.Usage`) are written in it too."""
    done = _FINISHED.returning(inbox.c.id).cte("done")
    following = _NEXT_OPEN_WITH_ROUTE.where(inbox.c.id != bindparam("b_id")).cte("following")
    released = routes.release_unless(following).cte("released")
    carried = usage.ctes(*usage_shape) if usage_shape is not None else ()
    return Prepared(select(following).add_cte(done, released, *carried), dialect="postgresql")


_FINISH_AND_NEXT = _finish_and_next()

# Kinds a claim never marks running in the statement that finds them: a command is marked
# without the history, a memory turn only if still wanted (`workers.drain_claim`).
_CLAIMED_APART = ("command", MEMORY_FLUSH)


FINISH, NEXT, TAKE = "finish", "next", "take"  # what `_claim_statement` does before it claims


@lru_cache(maxsize=64)
def _claim_statement(
    usage_shape: tuple[int, int, int, int] | None = None, *, first: str = FINISH
) -> Prepared:
    """PostgreSQL: `_finish_and_next`, and in the same statement the usual claim of what it
    finds: the next turn marked running in the route's live session, with that session's last
    `b_count` messages (`mark_running_with_history`). Only when nothing needs deciding in
    Python: a turn other than a command or memory turn, due (`not_before`), under
    `b_max` attempts, and a live session the route points at that has not ended. Otherwise
    `marked` is 0 and the caller claims it as `finish_and_next`'s caller would.

    `first`: FINISH as above; NEXT finishes nothing and lets nothing go (the key's next open
    turn is found with its route's session state, `route_sessions.session_state`, and claimed
    the same way); TAKE also takes the key's lease first (`routes.take_if`).

    One row (with NEXT or FINISH, none when no turn is open): the turn's, its route's,
    `marked`, and `history`, the messages as a JSON array, oldest first (NULL when there is none
    or nothing was marked); with TAKE, `taken_fence` first (NULL: the lease is busy) and the
    row's other columns NULL when no turn is open."""
    carried: tuple[Any, ...] = ()
    guards: tuple[Any, ...] = ()
    if first == FINISH:
        following = _NEXT_OPEN_WITH_ROUTE.where(inbox.c.id != bindparam("b_id")).cte("following")
        carried = (
            _FINISHED.returning(inbox.c.id).cte("done"),
            routes.release_unless(following).cte("released"),
            *(usage.ctes(*usage_shape) if usage_shape is not None else ()),
        )
    else:
        following = _NEXT_OPEN_WITH_ROUTE.cte("following")
    if first == TAKE:
        # The search reads the statement's snapshot, taken before the route row was locked: a
        # turn its last holder finished meanwhile may still look open there. Marking re-reads
        # the turn's row (the open status below), so such a turn is left alone and the caller
        # claims afresh.
        taken = routes.take_if(following).cte("taken")
        carried = (taken,)
        guards = (exists(select(1).select_from(taken)), IS_OPEN)
    running = (
        update(inbox)
        .where(
            inbox.c.id == following.c.id,
            *guards,
            *(following.c.kind != kind for kind in _CLAIMED_APART),
            or_(following.c.not_before.is_(None), following.c.not_before <= bindparam("b_now")),
            following.c.attempts < bindparam("b_max"),
            following.c.live_id.is_not(None),
            following.c.ended_at.is_(None),
        )
        .values(_running(following.c.live_id))
        .returning(inbox.c.id)
        .cte("running")
    )
    history = (
        select(messages_table)
        .where(
            messages_table.c.session_id == following.c.live_id,
            exists(select(1).select_from(running)),
        )
        .order_by(messages_table.c.id.desc())
        .limit(bindparam("b_count"))
        .cte("history")
    )
    marked = select(func.count()).select_from(running).scalar_subquery().label("marked")
    # The history as one JSON array of its rows (oldest first), on the turn's one row.
    rows = select(history).subquery("rows")
    messages_json = (
        select(func.json_agg(aggregate_order_by(literal_column("rows"), rows.c.id)))
        .select_from(rows)
        .scalar_subquery()
        .label("history")
    )
    if first != TAKE:
        statement = select(following, marked, messages_json)
    else:
        head = select(select(taken.c.fence).scalar_subquery().label("taken_fence")).cte("head")
        statement = select(head, following, marked, messages_json).select_from(
            head.outerjoin(following, true())
        )
    return Prepared(statement.add_cte(*carried, running, history), dialect="postgresql")


def _finish_params(
    turn_id: int, status: str, error: str | None, now: float, lease: Lease
) -> dict[str, Any]:
    """The binds of a finish that searches the key's next turn (`_finish_and_next`)."""
    return {
        "b_id": turn_id,
        "b_status": status,
        "b_now": now,
        "b_error": error,
        "b_key": lease.name,
        "b_fence": lease.fence,
    }


# What `finish_and_claim` found: the next turn and its route's state (as `NextTurn`), and the
# history the model is given when the statement marked that turn running (else None).
Claimed = tuple[TurnRow | None, Mapping[str, Any] | None, list[MessageRecord] | None]


def finish_and_claim(
    conn: Connection,
    finished: tuple[int, str, str | None],
    now: float,
    lease: Lease,
    used: usage.Usage | None,
    *,
    max_attempts: int,
    history: int,
) -> Claimed:
    """PostgreSQL: `finish_and_next` for `finished` (turn id, status, error), marking the turn
    it finds running with its last `history` messages where no decision is left to the caller
    (`_claim_statement`). One round trip, where finishing and marking were two."""
    params = {**_finish_params(*finished, now, lease), "b_max": max_attempts, "b_count": history}
    shape = used.shape if used is not None else None
    row = _claim_statement(shape).first(conn, {**params, **used.params()} if used else params)
    return _claimed(row)


def next_and_claim(
    conn: Connection, now: float, lease: Lease, *, max_attempts: int, history: int
) -> Claimed:
    """PostgreSQL, in a write that took or checked `lease` (its route row locked by that, so
    every turn recorded for the key is visible): the key's next open turn with its route's
    session state, marked running with its last `history` messages where no decision is left
    to the caller, as `finish_and_claim` does. One round trip, where finding and marking were
    two."""
    params = {"b_key": lease.name, "b_now": now, "b_max": max_attempts, "b_count": history}
    return _claimed(_claim_statement(first=NEXT).first(conn, params))


def take_and_claim(
    conn: Connection,
    key: str,
    holder: str,
    now: float,
    ttl: float,
    *,
    max_attempts: int,
    history: int,
) -> tuple[Lease | None, Claimed]:
    """PostgreSQL, one statement needing no transaction around it (`Store.commit_alone`):
    `routes.acquire_route` for `holder` when a turn of `key` is open (else the lease is taken
    and let go at once), and that turn claimed as `next_and_claim` claims it. The lease (None:
    busy) and the claim; a turn found but not marked (history None) is to be claimed afresh in
    a write under that lease, since it was found before the route was locked. Run twice, the
    second finds the lease busy (the first's until it expires)."""
    params = {
        "b_key": key,
        "b_now": now,
        "b_holder": holder,
        "b_expires": now + ttl,
        "b_max": max_attempts,
        "b_count": history,
    }
    row = _claim_statement(first=TAKE).first(conn, params)
    assert row is not None  # the head row is always there
    if row["taken_fence"] is None:
        return None, (None, None, None)
    lease = Lease(key, holder, int(row["taken_fence"]))
    return lease, _claimed(row if row["id"] is not None else None)


def _claimed(row: Mapping[str, Any] | None) -> Claimed:
    if row is None:
        return None, None, None
    turn, route = _turn_and_route(row)
    if not row["marked"]:
        return turn, route, None
    # JSON gives a whole-number timestamp as an int: the model is given floats, as read apart.
    return (
        turn,
        route,
        [
            MessageRecord.from_mapping({**found, "timestamp": float(found["timestamp"])})
            for found in row["history"] or []
        ],
    )


# The next open turn, and its route's session state when it was read with it (else None).
NextTurn = tuple[TurnRow | None, Mapping[str, Any] | None]


def _turn_and_route(row: Mapping[str, Any] | None) -> NextTurn:
    if row is None:
        return None, None
    return TurnRow.from_mapping(row), row if row["route_key"] is not None else None


def finish_and_next(
    conn: Connection,
    turn_id: int,
    status: str,
    now: float,
    error: str | None,
    lease: Lease,
    used: usage.Usage | None = None,
) -> NextTurn:
    """Inside the lease's fenced write (its route row locked by `routes.check_route`, so every
    turn recorded for the key is visible): finish `turn_id`, and return the key's next open turn
    (on PostgreSQL with its route's session state) or, when there is none, let the lease go; with
    `used`, write the turn's usage rows too. One round trip on PostgreSQL."""
    if conn.dialect.name != "postgresql":
        finish_turn(conn, turn_id, status, now, error=error)
        turn = next_open_turn(conn, lease.name)
        if turn is None:
            routes.release_route(conn, lease)
        if used is not None:
            used.write(conn)
        return turn, None
    params = _finish_params(turn_id, status, error, now, lease)
    if used is None:
        return _turn_and_route(_FINISH_AND_NEXT.first(conn, params))
    row = _finish_and_next(used.shape).first(conn, {**params, **used.params()})
    return _turn_and_route(row)


def mark_running(conn: Connection, turn_id: int, session_id: str, now: float) -> None:
    _MARK_RUNNING.rowcount(conn, {"b_id": turn_id, "b_now": now, "b_session": session_id})


# PostgreSQL: `mark_running` and the history the model is given, one statement.
_RUNNING_WITH_HISTORY = Prepared(
    message_rows.LAST_MESSAGES.add_cte(_RUNNING.returning(inbox.c.id).cte("running")),
    dialect="postgresql",
)


def mark_running_with_history(
    conn: Connection, turn_id: int, session_id: str, now: float, count: int
) -> list[MessageRecord]:
    """`mark_running`, then the session's last `count` messages (`messages.last_messages`):
    one round trip on PostgreSQL."""
    if conn.dialect.name != "postgresql":
        mark_running(conn, turn_id, session_id, now)
        return message_rows.last_messages(conn, session_id, count)
    params = {"b_id": turn_id, "b_now": now, "b_session": session_id, "b_count": count}
    return message_rows.history_from(_RUNNING_WITH_HISTORY.all(conn, params))


def finish_turn(
    conn: Connection, turn_id: int, status: str, now: float, error: str | None = None
) -> None:
    _FINISH.rowcount(conn, {"b_id": turn_id, "b_status": status, "b_now": now, "b_error": error})


def postpone_turn(conn: Connection, turn_id: int, not_before: float, error: str) -> None:
    """Put a failed attempt back in line, not to be retried before `not_before`."""
    conn.execute(_POSTPONE, {"b_id": turn_id, "b_not_before": not_before, "b_error": error})
