"""Claiming a key's next turn inside the lease's fenced write: finishing the turn before it,
passing over memory turns no longer wanted, deferring or burying, else marking it running in the
key's live session (made on first need, `current_session`). `workers.drain` runs what is claimed.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from shared.db import Connection
from shared.db.errors import TitleInUse
from shared.ids import CLI_HEX, looks_like_session_id, new_session_id
from shared.model import MessageRecord, SessionRecord
from shared.pipeline import inbox, leases, route_sessions, routes
from shared.platforms import CLI, gateway_platforms
from shared.store import messages, usage
from shared.store import sessions as session_rows
from shared.store.housekeeping import MEMORY_FLUSH
from shared.store.resume import runs_in_left_session
from shared.titles import TitleError
from workers.agent import compression
from workers.renewer import Held
from workers.runtime import Runtime

HISTORY_MESSAGES = 200


@dataclass(frozen=True, slots=True)
class Next:
    """What a write transaction found next in the key's line."""

    action: str  # run (marked running) | bury | defer | idle (lease released)
    turn: inbox.TurnRow | None = None
    session_id: str | None = None
    started: float = 0.0
    retry_in: float | None = None
    # The session and its recent history, when the claim's write read them (see claim_turn).
    context: tuple[SessionRecord, list[MessageRecord]] | None = None


@dataclass(frozen=True, slots=True)
class Finished:
    """The outcome of the turn a write finishes before it claims the next one."""

    turn_id: int
    status: str
    error: str | None = None
    used: usage.Usage | None = None  # the turn's usage rows, written with its finish


def claim_turn(
    conn: Connection,
    rt: Runtime,
    lease: leases.Lease,
    now: float,
    finished: Finished | None = None,
) -> Next:
    """Inside a fenced write: finish `finished` if given, then mark the key's next turn running,
    or release the lease if none."""
    # The next turn and (on PostgreSQL) its route's session state, read in one statement; with
    # `finished`, finishing, searching and (none open) releasing are one round trip there.
    if conn.dialect.name == "postgresql":
        if finished is None:
            turn, route, history = inbox.next_and_claim(conn, now, lease, **_limits(rt))
        else:
            done = (finished.turn_id, finished.status, finished.error)
            turn, route, history = inbox.finish_and_claim(
                conn, done, now, lease, finished.used, **_limits(rt)
            )
        if turn is not None and history is not None:
            return _marked(turn, route, history, now)
        released = finished is not None and turn is None
    elif finished is None:
        turn, route = inbox.next_open_turn(conn, lease.name), None
        released = False
    else:
        turn, route = inbox.finish_and_next(
            conn, finished.turn_id, finished.status, now, finished.error, lease, finished.used
        )
        released = turn is None
    while turn is not None and turn.kind == MEMORY_FLUSH and not _flush_still_wanted(conn, turn):
        moved_on = "session already moved on"
        turn, route = inbox.finish_and_next(conn, turn.id, inbox.CANCELLED, now, moved_on, lease)
        released = turn is None
    if turn is None:
        if not released:
            routes.release_route(conn, lease)
        return Next("idle")
    if turn.not_before is not None and turn.not_before > now:
        return Next("defer", turn, retry_in=turn.not_before - now)
    if turn.attempts >= rt.settings.pipeline.max_attempts:
        return Next("bury", turn)
    session_id, made = _current_session(conn, rt, turn, route)
    # On PostgreSQL the model's context is read here, not in a read transaction of its own after
    # it (BEGIN, the reads, COMMIT): the history with the turn's marking (one statement), the
    # session with the turn when it is the route's (as `route` read it). On SQLite a read of its
    # own costs no round trip, and here it would hold the one write lock.
    if turn.kind == "command" or conn.dialect.name != "postgresql":
        inbox.mark_running(conn, turn.id, session_id, now)
        return Next("run", turn, session_id, started=now)
    history = inbox.mark_running_with_history(conn, turn.id, session_id, now, HISTORY_MESSAGES)
    session = made or (inbox.live_session(route) if route is not None else None)
    if session is None or session.id != session_id:  # the route had none
        session = session_rows.require_session(conn, session_id)
    return Next("run", turn, session_id, started=now, context=(session, history))


def take_and_claim(
    rt: Runtime, key: str, holder: str
) -> tuple[leases.Lease | None, Next | None, float]:
    """Take `key`'s lease for `holder` and claim its first turn, in one write: the lease (None:
    busy), what was claimed, and the clock it was claimed at.

    On PostgreSQL one statement sent alone (`inbox.take_and_claim`, one round trip where the
    write with its BEGIN and COMMIT was four) claims a due, ordinary turn of a live session; any
    other turn it finds is claimed afresh in a write under the lease it took."""
    if rt.store.dialect != "postgresql":

        def take(conn: Connection) -> tuple[leases.Lease | None, Next | None, float]:
            now = rt.clock()
            lease = routes.acquire_route(conn, key, holder, now, rt.lease_ttl)
            return lease, claim_turn(conn, rt, lease, now) if lease is not None else None, now

        return rt.store.commit(take)
    now = rt.clock()
    lease, (turn, route, history) = rt.store.commit_alone(
        lambda conn: inbox.take_and_claim(conn, key, holder, now, rt.lease_ttl, **_limits(rt))
    )
    if lease is None:
        return None, None, now
    if turn is None:  # nothing open: the lease was let go in that statement
        return lease, Next("idle"), now
    if history is not None:
        return lease, _marked(turn, route, history, now), now

    def claim(conn: Connection) -> tuple[Next, float]:
        now = rt.clock()
        routes.check_route(conn, lease, now, rt.lease_ttl)
        return claim_turn(conn, rt, lease, now), now

    try:
        first, now = rt.store.commit(claim)
    except leases.LeaseLost:
        return None, None, now
    except BaseException:  # the lease is taken, and nothing will run under it: let it go
        with contextlib.suppress(Exception):
            rt.store.commit(lambda conn: routes.release_route(conn, lease))
        raise
    return lease, first, now


def _limits(rt: Runtime) -> dict[str, int]:
    """What a claim statement marks by (`inbox.finish_and_claim` and its kin)."""
    return {"max_attempts": rt.settings.pipeline.max_attempts, "history": HISTORY_MESSAGES}


def _marked(turn: inbox.TurnRow, route: Any, history: list[MessageRecord], now: float) -> Next:
    """A turn a claim statement marked running in the route's live session, with the history
    it read."""
    assert route is not None
    session = inbox.live_session(route)
    assert session is not None
    return Next("run", turn, session.id, started=now, context=(session, history))


def session_context(conn: Connection, session_id: str) -> tuple[SessionRecord, list[MessageRecord]]:
    """What the model is given of the session: its record and its last HISTORY_MESSAGES."""
    session = session_rows.require_session(conn, session_id)
    return session, messages.last_messages(conn, session_id, HISTORY_MESSAGES)


def _flush_still_wanted(conn: Connection, turn: inbox.TurnRow) -> bool:
    """A reset's memory turn runs only in the live session it was queued for."""
    session_id = turn.flush_session_id
    if session_id is None or route_sessions.route_session_id(conn, turn.session_key) != session_id:
        return False
    record = session_rows.get_session(conn, session_id)
    return record is not None and record.ended_at is None


def claim_next(rt: Runtime, held: Held) -> Next:
    def claim(conn: Connection) -> Next:
        now = rt.clock()
        routes.check_route(conn, held.lease, now, rt.lease_ttl)
        return claim_turn(conn, rt, held.lease, now)

    return rt.store.commit(claim)


def current_session(
    conn: Connection, rt: Runtime, turn: inbox.TurnRow, route: Any | None = None
) -> str:
    """The key's live session, created on first need (the lease makes this single-flight).
    A terminal's session that was left still takes the turns sent to it (`resume`). `route`:
    the key's `route_sessions.session_state` if this transaction has read it already."""
    return _current_session(conn, rt, turn, route)[0]


def _current_session(
    conn: Connection, rt: Runtime, turn: inbox.TurnRow, route: Any | None = None
) -> tuple[str, SessionRecord | None]:
    """`current_session`, with the session's record when it was made here (as written: the
    row it inserted, counters at their start), saving the claim a read of it."""
    if route is None:
        route = route_sessions.session_state(conn, turn.session_key)
    assert route is not None  # the turn's arrival made the route row
    live = route["live_id"]
    if live is not None and (
        route["ended_at"] is None
        or runs_in_left_session(
            conn, live, route["end_reason"], route["ended_at"], turn.received_at
        )
    ):
        return str(live), None
    now = rt.clock()
    columns: dict[str, Any] = {
        "user_id": turn.user_id,
        "session_key": turn.session_key,
        "chat_id": turn.chat_id,
        "chat_type": turn.chat_type,
        "thread_id": turn.thread_id,
        "model": rt.settings.model.name,
    }
    terminal = _terminal_id(conn, turn)
    if terminal is None and route["pending_title"] is None and conn.dialect.name == "postgresql":
        made = _made_attached(conn, rt, turn, now, columns)
        if made is not None:
            return made.id, made
    session_id = terminal or compression.free_session_id(
        conn, rt.now_datetime(), gateway=turn.platform in gateway_platforms()
    )
    try:
        made = session_rows.create_session(
            conn,
            session_id=session_id,
            source=turn.platform,
            now=now,
            title=route["pending_title"],
            **columns,
        )
    except (TitleInUse, TitleError):
        made = session_rows.create_session(
            conn, session_id=session_id, source=turn.platform, now=now, **columns
        )
    route_sessions.attach(conn, turn.session_key, session_id, now)
    return session_id, made


def _made_attached(
    conn: Connection, rt: Runtime, turn: inbox.TurnRow, now: float, columns: dict[str, Any]
) -> SessionRecord | None:
    """PostgreSQL: a new untitled session under a fresh id and the route pointed at it, in one
    statement (`sessions.create_attached`), where the look for a free id, the insert and the
    attach were three. A taken id is tried again with another, as `free_session_id` would;
    None after as many tries (the general path then decides as before)."""
    gateway = turn.platform in gateway_platforms()
    for _ in range(compression.ID_TRIES):
        made = session_rows.create_attached(
            conn,
            session_id=new_session_id(rt.now_datetime(), gateway=gateway),
            source=turn.platform,
            now=now,
            key=turn.session_key,
            **columns,
        )
        if made is not None:
            return made
    return None


def _terminal_id(conn: Connection, turn: inbox.TurnRow) -> str | None:
    """A terminal names its chat after the session it starts: use that id while it is free."""
    chat = turn.chat_id
    if (
        turn.platform != CLI
        or not looks_like_session_id(chat)
        or len(chat.rsplit("_", 1)[1]) != CLI_HEX
    ):
        return None
    return None if session_rows.session_exists(conn, chat) else chat
