"""The statements a turn's claim and outcome merge on PostgreSQL behave as the ones they replace
(both databases: SQLite runs a statement per step): the lease's fence check carried by the
append of the turn's messages, the marking of a turn running carried by the read of its
history, the session read with the turn it is claimed for, the turn's usage rows written
with its finish, its first reply written with its messages, and a receiver's look for the
event with the route's bump and the insert. A key's first exchange (its session made and
attached, its auto-title): test_pg_first_turn_merges."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from producers.intake import accept
from shared.db import Connection, Store
from shared.db.errors import SessionNotFound
from shared.db.schema import inbox as inbox_table
from shared.db.schema import outbox as outbox_table
from shared.db.schema import routes as routes_table
from shared.db.schema import usage_daily, usage_ledger, usage_sessions, usage_tools
from shared.model import SessionRecord
from shared.pipeline import inbox, outbox, routes
from shared.pipeline.leases import Lease, LeaseLost
from shared.pricing import Pricing
from shared.session_key import SessionKey
from shared.settings import Settings
from shared.store import messages, usage
from shared.store.sessions import create_session, require_session
from shared.store.usage import Where
from shared.usage import ModelCall, ToolUse
from tests.integration.storekit import pg_round_trips
from tests.pipeline_helpers import ScriptedAgent, make_runtime, turn
from workers.agent.base import AgentRequest
from workers.drain import drain

pytestmark = pytest.mark.both_databases

ROWS = [messages.NewRow("user", "hi", 5), messages.NewRow("assistant", "hello", 6)]


def _leased(store: Store) -> tuple[Lease, Lease]:
    """A key with a session, an old lease that expired and the new one taken after it."""
    with store.write() as conn:
        create_session(conn, session_id="s1", source="cli", now=1)
        inbox.record_turn(conn, turn(0), SessionKey("k", shared=False), now=1)
        old = routes.acquire_route(conn, "k", "old", now=1, ttl=1)
        new = routes.acquire_route(conn, "k", "new", now=5, ttl=30)
    assert old is not None and new is not None
    return old, new


def _append(store: Store, tmp: Path, fence: routes.Fence) -> list[int]:
    """The outcome's first write: the rows with the fence check; its round trips (PostgreSQL)."""
    with store.write() as conn:
        if store.dialect != "postgresql":
            messages.append_messages(conn, "s1", ROWS, input_tokens=3, fence=fence)
            return []
        with pg_round_trips(conn, tmp) as trips:
            messages.append_messages(conn, "s1", ROWS, input_tokens=3, fence=fence)
    return trips


def test_an_append_under_a_stale_fence_writes_nothing(store: Store, tmp_path: Path) -> None:
    old, new = _leased(store)
    with pytest.raises(LeaseLost):
        _append(store, tmp_path, routes.Fence(old, now=6, ttl=30))
    with store.read() as conn:
        session = require_session(conn, "s1")
        route = conn.execute(select(routes_table)).one()
        assert messages.transcript(conn, "s1") == []
    assert (session.message_count, session.input_tokens, session.last_active_at) == (0, 0, 1)
    assert (route.lease_holder, route.fence, route.lease_expires_at) == ("new", new.fence, 35)


def test_an_append_under_the_fence_checks_it_in_the_same_round_trip(
    store: Store, tmp_path: Path
) -> None:
    _, new = _leased(store)
    trips = _append(store, tmp_path, routes.Fence(new, now=6, ttl=30))
    if store.dialect == "postgresql":
        assert trips == [1]
    with store.read() as conn:
        session = require_session(conn, "s1")
        expires = conn.execute(select(routes_table.c.lease_expires_at)).scalar_one()
        stored = [(m.role, m.content) for m in messages.transcript(conn, "s1")]
    assert stored == [("user", "hi"), ("assistant", "hello")]
    assert (session.message_count, session.input_tokens, session.last_active_at) == (2, 3, 6)
    assert expires == 36  # the check extends the lease, as check_route does


def test_a_fenced_append_with_no_rows_still_checks_the_fence(store: Store) -> None:
    old, _ = _leased(store)
    with pytest.raises(LeaseLost), store.write() as conn:
        messages.append_messages(conn, "s1", [], fence=routes.Fence(old, now=6, ttl=30))


def test_marking_a_turn_running_reads_the_history_the_model_is_given(
    store: Store, tmp_path: Path
) -> None:
    key = SessionKey("k", shared=False)
    with store.write() as conn:
        create_session(conn, session_id="s1", source="cli", now=1)
        rows = [messages.NewRow("user", f"m{n}", 1 + n) for n in range(5)]
        messages.append_messages(conn, "s1", rows)
        recorded = inbox.record_turn(conn, turn(0), key, now=7)
    with store.write() as conn:
        if store.dialect != "postgresql":
            history = inbox.mark_running_with_history(conn, recorded.turn_id, "s1", 8, 3)
        else:
            with pg_round_trips(conn, tmp_path) as trips:
                history = inbox.mark_running_with_history(conn, recorded.turn_id, "s1", 8, 3)
            assert trips == [1]
    with store.read() as conn:
        assert history == messages.last_messages(conn, "s1", 3)
        running = conn.execute(
            select(inbox_table.c.status, inbox_table.c.attempts, inbox_table.c.session_id)
        ).one()
    assert [m.content for m in history] == ["m2", "m3", "m4"]
    assert tuple(running) == (inbox.RUNNING, 1, "s1")


def test_the_model_is_given_the_session_as_stored_when_its_turn_was_claimed(
    settings: Settings, store: Store
) -> None:
    """The first turn (its session made by the claim), a later one (the session read with the
    turn after the lease is taken) and one of a batch (read with the finish of the turn before
    it): each request's session is the stored row, counters and all."""
    seen: list[tuple[SessionRecord, SessionRecord]] = []

    def reply(request: AgentRequest) -> str:
        with store.read() as conn:  # no transaction is open while the model thinks
            seen.append((request.session, require_session(conn, request.session.id)))
        return f"reply to {request.turn.text}"

    rt, _ = make_runtime(settings, store, ScriptedAgent(reply=reply))
    key = accept(store, rt.waker, turn(0), settings=settings, clock=time.time).session_key
    assert drain(rt, key).ran == 1
    for n in (1, 2):
        accept(store, rt.waker, turn(n), settings=settings, clock=time.time)
    assert drain(rt, key).ran == 2
    assert [given == stored for given, stored in seen] == [True] * 3
    assert [given.message_count for given, _ in seen] == [0, 2, 4]


def _usage_tables(conn: Connection) -> list[list[tuple[object, ...]]]:
    """Every usage table's rows (the ledger's without its id)."""
    return [
        sorted(
            (tuple(row)[table is usage_ledger :] for row in conn.execute(select(table))), key=repr
        )
        for table in (usage_ledger, usage_daily, usage_sessions, usage_tools)
    ]


class _RolledBack(Exception):
    pass


def test_a_turns_usage_is_written_with_its_finish_as_on_its_own(
    store: Store, tmp_path: Path
) -> None:
    """The same ledger and rollup rows as `usage.record` writes, in the finish's round trip on
    PostgreSQL (the lease let go with it: no turn is waiting)."""
    calls = [
        ModelCall("chat", "m1", 90_000.0, 10, 4, 120.0, tools=(ToolUse("search"),)),
        ModelCall("chat", "m2", 90_001.0, 7, 2, 80.0),
    ]
    where = Where(platform="cli", session_id="s1", turn_id=1)
    key = SessionKey("k", shared=False)
    with store.write() as conn:
        create_session(conn, session_id="s1", source="cli", now=1)
        recorded = inbox.record_turn(conn, turn(0), key, now=1)
        lease = routes.acquire_route(conn, "k", "worker", now=2, ttl=30)
        assert lease is not None
        inbox.mark_running(conn, recorded.turn_id, "s1", 2)
    expected: list[list[tuple[object, ...]]] = []
    with pytest.raises(_RolledBack), store.write() as conn:  # what record writes on its own
        usage.record(conn, calls, where, Pricing({}))
        expected = _usage_tables(conn)
        raise _RolledBack
    used = usage.rows_of(calls, where, Pricing({}))
    assert used is not None and used.shape == (2, 2, 2, 1)
    with store.write() as conn:
        routes.check_route(conn, lease, 3, 30)
        if store.dialect != "postgresql":
            found = inbox.finish_and_next(conn, recorded.turn_id, inbox.DONE, 3, None, lease, used)
        else:
            with pg_round_trips(conn, tmp_path) as trips:
                found = inbox.finish_and_next(
                    conn, recorded.turn_id, inbox.DONE, 3, None, lease, used
                )
            assert trips == [1]
    assert found == (None, None)
    with store.read() as conn:
        assert _usage_tables(conn) == expected
        done = inbox.get_turn(conn, recorded.turn_id)
        holder = conn.execute(select(routes_table.c.lease_holder)).scalar_one()
    assert [len(rows) for rows in expected] == [2, 2, 2, 1]
    assert done is not None and done.status == inbox.DONE and holder is None


def test_recording_a_turn_of_a_known_key_is_one_round_trip(store: Store, tmp_path: Path) -> None:
    """The look for the event, the route's bump (with its wake-up claim) and the insert: one
    statement on PostgreSQL; a redelivery bumps nothing; a key's first turn makes its route."""
    key = SessionKey("k", shared=False)

    def record(n: int, now: float) -> tuple[inbox.Recorded, list[int]]:
        with store.write() as conn:
            if store.dialect != "postgresql":
                return inbox.record_turn(conn, turn(n), key, now=now, claim_wake=True), []
            with pg_round_trips(conn, tmp_path) as trips:
                found = inbox.record_turn(conn, turn(n), key, now=now, claim_wake=True)
        return found, trips

    first, _ = record(0, 1)
    second, trips = record(1, 2)
    again, _ = record(1, 3)
    if store.dialect == "postgresql":
        assert trips == [1]
    assert (first.seq, first.duplicate, first.wake_pending) == (1, False, False)
    assert (second.seq, second.duplicate, second.wake_pending) == (2, False, True)
    assert (again.turn_id, again.seq, again.duplicate) == (second.turn_id, 2, True)
    with store.write() as conn:
        lease = routes.acquire_route(conn, "k", "worker", now=4, ttl=30)
    assert lease is not None
    held, _ = record(2, 5)
    assert (held.seq, held.lease_held, held.wake_pending) == (3, True, False)
    with store.read() as conn:
        next_seq = conn.execute(select(routes_table.c.next_seq)).scalar_one()
        recorded = conn.execute(select(inbox_table.c.seq).order_by(inbox_table.c.id)).scalars()
        assert (next_seq, list(recorded)) == (3, [1, 2, 3])


def _outbox_rows(conn: Connection) -> list[tuple[object, ...]]:
    """Every outbox row, its id included, in id order."""
    return [tuple(row) for row in conn.execute(select(outbox_table).order_by(outbox_table.c.id))]


@pytest.mark.parametrize("delivered", [False, True])
def test_a_turns_reply_is_written_with_its_messages_as_on_its_own(
    store: Store, tmp_path: Path, delivered: bool
) -> None:
    """The reply carried by the fenced append: the same outbox row (`outbox.add`'s, pending or
    delivered), after the messages, in the append's round trip on PostgreSQL; and the rows
    the append returns, as `add` returns it."""
    _, new = _leased(store)
    reply = outbox.Reply(
        platform="telegram",
        chat_id="c1",
        text="hello",
        now=6,
        turn_id=1,
        session_id="s1",
        thread_id="t1",
        reply_to="m1",
        delivered=delivered,
    )
    expected: list[tuple[object, ...]] = []
    alone: outbox.OutboxRow | None = None
    with pytest.raises(_RolledBack), store.write() as conn:  # what add writes on its own
        messages.append_messages(conn, "s1", ROWS, fence=routes.Fence(new, now=6, ttl=30))
        alone = outbox.add(conn, **{k: getattr(reply, k) for k in _REPLY_FIELDS})
        expected = _outbox_rows(conn)
        raise _RolledBack
    with store.write() as conn:
        fence = routes.Fence(new, now=6, ttl=30)
        if store.dialect != "postgresql":
            written = messages.append_messages(conn, "s1", ROWS, fence=fence, reply=reply)
        else:
            with pg_round_trips(conn, tmp_path) as trips:
                written = messages.append_messages(conn, "s1", ROWS, fence=fence, reply=reply)
            assert trips == [1]
    with store.read() as conn:
        rows = _outbox_rows(conn)
        stored = [(m.role, m.content) for m in messages.transcript(conn, "s1")]
    assert alone is not None and written is not None
    # The sequence moved on past the rolled-back row's id; all else is the same.
    assert [row[1:] for row in rows] == [row[1:] for row in expected]
    assert written == dataclasses.replace(alone, id=int(str(rows[0][0])))
    assert (written.status, written.attempts) == (
        (outbox.SENT, 1) if delivered else (outbox.PENDING, 0)
    )
    assert stored == [("user", "hi"), ("assistant", "hello")]


@pytest.mark.parametrize(
    ("stale", "session", "refused"),
    [(True, "s1", LeaseLost), (False, "gone", SessionNotFound)],
    ids=["stale-fence", "missing-session"],
)
def test_a_reply_carried_by_a_refused_append_is_not_written(
    store: Store, stale: bool, session: str, refused: type[Exception]
) -> None:
    """Under a stale fence, or for a session that is gone, the append and its reply are
    refused together: no outbox row."""
    old, new = _leased(store)
    reply = outbox.Reply(platform="cli", chat_id="c1", text="hello", now=6, session_id=session)
    fence = routes.Fence(old if stale else new, now=6, ttl=30)
    with pytest.raises(refused), store.write() as conn:
        messages.append_messages(conn, session, ROWS, fence=fence, reply=reply)
    with store.read() as conn:
        assert _outbox_rows(conn) == []


def test_a_reply_after_more_rows_than_one_statement_takes_follows_them(store: Store) -> None:
    """Past eight rows the rest of the messages follow the first statement, and the reply them
    (its own statement, as before)."""
    _, new = _leased(store)
    rows = [messages.NewRow("user" if n % 2 else "assistant", f"m{n}", 5 + n) for n in range(11)]
    reply = outbox.Reply(platform="cli", chat_id="c1", text="done", now=20, session_id="s1")
    with store.write() as conn:
        fence = routes.Fence(new, now=6, ttl=30)
        written = messages.append_messages(conn, "s1", rows, fence=fence, reply=reply)
    with store.read() as conn:
        stored = [m.content for m in messages.transcript(conn, "s1")]
        (row,) = _outbox_rows(conn)
    assert written is not None and written.id == row[0] and written.text == "done"
    assert stored == [f"m{n}" for n in range(11)]


_REPLY_FIELDS = (
    "platform",
    "chat_id",
    "text",
    "now",
    "turn_id",
    "session_id",
    "thread_id",
    "reply_to",
    "delivered",
)
