"""What a turn's writes cost PostgreSQL in round trips, and that the merged statements behave as
the statements they replace (both databases: SQLite runs the statement-per-step path)."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, ExitStack, nullcontext
from pathlib import Path

import pytest
from sqlalchemy import exc, select

from producers.intake import accept, checked, record_all
from shared.db import Connection, Store
from shared.db.errors import SessionNotFound
from shared.db.schema import inbox as inbox_table
from shared.db.schema import leases as leases_table
from shared.db.schema import outbox as outbox_table
from shared.db.schema import routes as routes_table
from shared.pipeline import inbox, leases, outbox, route_sessions, routes
from shared.pipeline.leases import Lease
from shared.session_key import SessionKey
from shared.settings import Settings
from shared.store import messages
from shared.store.sessions import create_session, require_session
from tests.integration.storekit import pg_round_trips, pg_store_round_trips
from tests.integration.test_pg_connections import hold_every_connection, terminate
from tests.pipeline_helpers import ScriptedAgent, make_runtime, transcript_of, turn
from workers.agent.base import AgentRequest
from workers.drain import drain

pytestmark = pytest.mark.both_databases


def _finish_and_next(
    store: Store, tmp: Path, turn_id: int, status: str, error: str | None, lease: Lease
) -> inbox.TurnRow | None:
    with store.write() as conn:
        routes.check_route(conn, lease, 10, 30)  # as every fenced write begins
        if store.dialect != "postgresql":
            following, _ = inbox.finish_and_next(conn, turn_id, status, 10, error, lease)
            return following
        with pg_round_trips(conn, tmp) as trips:
            following, route = inbox.finish_and_next(conn, turn_id, status, 10, error, lease)
        assert trips == [1]
        if following is not None:  # read with it: the route's session state
            assert route is not None and route["live_id"] is None and route["pending_title"] is None
        return following


def test_finishing_a_turn_hands_over_the_next_or_lets_the_lease_go(
    store: Store, tmp_path: Path
) -> None:
    key = SessionKey("k", shared=False)
    with store.write() as conn:
        first = inbox.record_turn(conn, turn(0), key, now=1)
        second = inbox.record_turn(conn, turn(1), key, now=2)
        lease = routes.acquire_route(conn, "k", "worker", now=3, ttl=30)
        assert lease is not None
        inbox.mark_running(conn, first.turn_id, "s1", 3)
    following = _finish_and_next(store, tmp_path, first.turn_id, inbox.DONE, None, lease)
    assert following is not None and following.id == second.turn_id
    with store.read() as conn:
        done = inbox.get_turn(conn, first.turn_id)
        holder = conn.execute(select(routes_table.c.lease_holder)).scalar_one()
    assert done is not None and (done.status, done.finished_at) == (inbox.DONE, 10)
    assert holder == "worker"  # a turn is waiting: the lease is kept
    with store.write() as conn:
        inbox.mark_running(conn, second.turn_id, "s1", 10)
    assert _finish_and_next(store, tmp_path, second.turn_id, inbox.FAILED, "boom", lease) is None
    with store.read() as conn:
        failed = inbox.get_turn(conn, second.turn_id)
        route = conn.execute(select(routes_table)).one()
    assert failed is not None and (failed.status, failed.error) == (inbox.FAILED, "boom")
    assert (route.lease_holder, route.lease_expires_at, route.fence) == (None, None, lease.fence)


def test_a_stale_fence_lets_nothing_go(store: Store, tmp_path: Path) -> None:
    """The release is fenced as `release_route` is: an old lease's finish leaves the new one."""
    key = SessionKey("k", shared=False)
    with store.write() as conn:
        only = inbox.record_turn(conn, turn(0), key, now=1)
        old = routes.acquire_route(conn, "k", "old", now=1, ttl=1)
        new = routes.acquire_route(conn, "k", "new", now=5, ttl=30)
        assert old is not None and new is not None
        assert inbox.finish_and_next(conn, only.turn_id, inbox.DONE, 6, None, old) == (None, None)
        holder = conn.execute(select(routes_table.c.lease_holder)).scalar_one()
    assert holder == "new"


def test_a_turns_messages_and_the_session_bump_are_one_round_trip(
    store: Store, tmp_path: Path
) -> None:
    """The activity and token bump and the rows (in order, counted by the trigger on PostgreSQL)
    as one statement; past eight rows the rest follow as before."""
    with store.write() as conn:
        create_session(conn, session_id="s1", source="cli", now=1)
    rows = [messages.NewRow("user" if n % 2 else "assistant", f"m{n}", 5 + n) for n in range(11)]
    for chunk in (rows[:3], rows[3:]):
        with store.write() as conn:
            if store.dialect != "postgresql":
                messages.append_messages(conn, "s1", chunk, input_tokens=4, output_tokens=2)
                continue
            with pg_round_trips(conn, tmp_path) as trips:
                messages.append_messages(conn, "s1", chunk, input_tokens=4, output_tokens=2)
            assert trips == [1 if len(chunk) <= 8 else 2]
    with store.read() as conn:
        session = require_session(conn, "s1")
        stored = messages.transcript(conn, "s1")
    assert [m.content for m in stored] == [f"m{n}" for n in range(11)]
    assert (session.message_count, session.input_tokens, session.output_tokens) == (11, 8, 4)
    assert session.last_active_at == 15


def test_appending_to_a_missing_session_writes_nothing(store: Store) -> None:
    with pytest.raises(SessionNotFound), store.write() as conn:
        messages.append_messages(conn, "gone", [messages.NewRow("user", "hi", 1)])
    with store.read() as conn:
        assert messages.transcript(conn, "gone") == []


def test_a_turn_of_a_running_session_costs_postgresql_few_round_trips(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    """The drain of one turn of a session that exists (the offline model: a reply, a usage row)
    with its delivery (a memory sender) on PostgreSQL. The claim: the lease taken and the next
    turn marked running with the history for the model, one statement sent alone. The outcome:
    BEGIN, fence with the bump, the messages and the reply, the lane's lease, its rows, finish
    with next/release and usage, COMMIT. The send: the lane's fence, sent, next rows and release, in
    one statement with no BEGIN or COMMIT around it."""
    if store.dialect != "postgresql":
        pytest.skip("round trips are what a statement costs on PostgreSQL")
    rt, _ = make_runtime(settings, store)
    first = accept(store, rt.waker, turn(0), settings=settings, clock=time.time)
    assert drain(rt, first.session_key).ran == 1
    accept(store, rt.waker, turn(1), settings=settings, clock=time.time)
    with pg_store_round_trips(store, tmp_path) as trips:
        result = drain(rt, first.session_key)
    assert (result.ran, result.reason) == (1, "idle")
    assert trips == [8]
    assert transcript_of(store, first.session_key)[-2][1] == "message 1"


def _replies_in_a_held_lane(store: Store, count: int) -> tuple[list[outbox.OutboxRow], str, Lease]:
    """`count` replies to one chat, r0 first, and its lane's lease held by "worker"."""
    with store.write() as conn:
        written = [
            outbox.add(conn, platform="telegram", chat_id="c1", text=f"r{n}", now=n)
            for n in range(count)
        ]
        lane = written[0].lane
        lease = leases.acquire_named(conn, f"lane:{lane}", "worker", 1, 30)
        assert lease is not None
    return written, lane, lease


def test_marking_a_reply_sent_under_a_moved_fence_writes_nothing(store: Store) -> None:
    with store.write() as conn:
        written = outbox.add(conn, platform="telegram", chat_id="c1", text="r0", now=1)
        old = leases.acquire_named(conn, f"lane:{written.lane}", "worker", 1, 30)
        assert old is not None
    with store.write() as conn:  # its holder died: another took the lane when it expired
        taken = leases.acquire_named(conn, old.name, "other", 40, 30)
        assert taken is not None and taken.fence == old.fence + 1
    with pytest.raises(leases.LeaseLost), store.write() as conn:
        outbox.mark_sent_and_next(conn, written.id, "p1", 41, old, written.lane, 10, 30)
    with store.read() as conn:
        assert outbox.get_row(conn, written.id) == written
        lease = conn.execute(select(leases_table.c.holder, leases_table.c.expires_at)).one()
    assert tuple(lease) == ("other", 70)


def test_marking_a_reply_sent_twice_leaves_what_once_did(store: Store) -> None:
    """What `Store.commit_alone` may do when the connection died after the commit: run it
    again. The row stays sent, and the lane as the first run left it."""
    written, lane, lease = _replies_in_a_held_lane(store, 2)
    for row_id, left in [(written[0].id, ["r1"]), (written[1].id, [])]:

        def mark(conn: Connection, row_id: int = row_id) -> list[outbox.OutboxRow]:
            return outbox.mark_sent_and_next(conn, row_id, "p1", 10, lease, lane, 10, 30)

        for _ in range(2):
            rows = store.commit_alone(mark)
            assert [r.text for r in rows] == left
            with store.read() as conn:
                assert outbox.get_row(conn, row_id).status == outbox.SENT  # type: ignore[union-attr]
                holder = conn.execute(select(leases_table.c.holder)).scalar_one()
            assert holder == ("worker" if left else None)


def test_marking_a_reply_sent_hands_over_the_next_or_lets_the_lane_go(
    store: Store, tmp_path: Path
) -> None:
    def sent_and_next(row_id: int, lease: Lease) -> list[outbox.OutboxRow]:
        with store.write() as conn:
            if store.dialect != "postgresql":
                return outbox.mark_sent_and_next(conn, row_id, "p1", 10, lease, lane, 10, 30)
            with pg_round_trips(conn, tmp_path) as trips:
                rows = outbox.mark_sent_and_next(conn, row_id, "p1", 10, lease, lane, 10, 30)
            assert trips == [1]
            return rows

    written, lane, lease = _replies_in_a_held_lane(store, 3)
    rows = sent_and_next(written[0].id, lease)
    assert [r.text for r in rows] == ["r1", "r2"]
    assert [r.text for r in sent_and_next(written[1].id, lease)] == ["r2"]
    assert sent_and_next(written[2].id, lease) == []
    with store.read() as conn:
        left = outbox.pending(conn, lane)
        holder = conn.execute(select(leases_table.c.holder)).scalar_one()
        first = conn.execute(
            select(outbox_table.c.status, outbox_table.c.platform_message_id).where(
                outbox_table.c.id == written[0].id
            )
        ).one()
    assert left == [] and holder is None
    assert tuple(first) == (outbox.SENT, "p1")


def test_each_turn_of_a_batch_is_given_the_history_its_predecessors_wrote(
    settings: Settings, store: Store
) -> None:
    """The turns after the first are claimed in their predecessor's outcome write (and on
    PostgreSQL their session and history are read there too): each still sees every message
    written before it, in its own session."""
    seen: list[tuple[int, str | None, str | None]] = []

    def reply(request: AgentRequest) -> str:
        last = request.history[-1].content if request.history else None
        seen.append((len(request.history), last, request.session.title))
        return f"reply to {request.turn.text}"

    rt, _ = make_runtime(settings, store, ScriptedAgent(reply=reply))
    keys = {
        accept(store, rt.waker, turn(n), settings=settings, clock=time.time).session_key
        for n in range(3)
    }
    (key,) = keys
    assert drain(rt, key).ran == 3
    with store.read() as conn:
        session_id = route_sessions.route_session_id(conn, key)
        assert session_id is not None
        title = require_session(conn, session_id).title
    assert [(n, last) for n, last, _ in seen] == [
        (0, None),
        (2, "reply to message 0"),
        (4, "reply to message 1"),
    ]
    assert [t for _, _, t in seen] == [title] * 3  # as the session is (titled by a task)


def test_a_receiver_turn_of_a_key_with_a_route_is_one_round_trip(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    """On PostgreSQL a turn of a key that has a route is one statement (the event's lookup, the
    route's bump with the wake-up claim, the insert) committed on its own: no BEGIN, no COMMIT.
    A key's first turn tries it (1: no route, nothing written), then makes the route and the
    turn in a transaction (BEGIN, route, turn, COMMIT: 4). A redelivery is found by that one
    statement (1). SQLite records them as before (a transaction each)."""
    waker = make_runtime(settings, store)[0].waker

    def counted() -> AbstractContextManager[list[int]]:
        if store.dialect != "postgresql":
            return nullcontext([])
        return pg_store_round_trips(store, tmp_path)

    with counted() as first_trips:
        first = accept(store, waker, turn(0), settings=settings, clock=time.time)
    with counted() as next_trips:
        second = accept(store, waker, turn(1), settings=settings, clock=time.time)
    with counted() as again_trips:
        again = accept(store, waker, turn(1), settings=settings, clock=time.time)
    with counted() as stop_trips:  # a /stop also marks the route: its transaction as before
        stop = accept(store, waker, turn(2, text="/stop"), settings=settings, clock=time.time)
    with counted() as lone_trips:  # the recorder's path when a turn arrives alone
        (lone,) = record_all(store, [checked(turn(3), settings)], clock=time.time)
    assert isinstance(lone, inbox.Recorded) and (lone.seq, lone.duplicate) == (4, False)
    assert (stop.seq, stop.duplicate) == (3, False)
    assert (first.seq, second.seq, first.duplicate, second.duplicate) == (1, 2, False, False)
    assert (again.turn_id, again.seq, again.duplicate) == (second.turn_id, 2, True)
    with store.read() as conn:
        rows = conn.execute(select(inbox_table.c.event_id, inbox_table.c.seq)).all()
        route = conn.execute(select(routes_table.c.next_seq)).scalar_one()
    assert sorted(tuple(r) for r in rows) == [("c1-0", 1), ("c1-1", 2), ("c1-2", 3), ("c1-3", 4)]
    assert route == 4
    if store.dialect == "postgresql":
        assert (first_trips, next_trips, again_trips) == ([5], [1], [1])
        assert (stop_trips, lone_trips) == ([4], [1])


def test_a_lone_statement_that_fails_writes_nothing(store: Store) -> None:
    """Store.commit_alone: a statement that fails midway (its second row breaks the routes'
    primary key) leaves nothing of its first row, on PostgreSQL's autocommit as in a
    transaction; the connection goes back to the pool usable (not left in autocommit)."""
    row = (
        "INSERT INTO routes"
        " (session_key, platform, chat_id, chat_type, next_seq, created_at, updated_at) "
    )
    twice = row + "VALUES ('dup', 'cli', 'c', 'dm', 0, 1, 1), ('dup', 'cli', 'c', 'dm', 0, 1, 1)"
    with pytest.raises(exc.IntegrityError):
        store.commit_alone(lambda conn: conn.exec_driver_sql(twice))
    with store.read() as conn:
        assert conn.execute(select(routes_table.c.session_key)).all() == []
    if store.dialect == "postgresql":  # every pooled connection is back out of autocommit
        with ExitStack() as held:
            raws = [held.enter_context(store.read()).connection.driver_connection for _ in range(3)]
            assert [raw.autocommit for raw in raws] == [False] * 3  # type: ignore[union-attr]
    with pytest.raises(RuntimeError), store.write() as conn:  # a transaction again: undone
        conn.exec_driver_sql(row + "VALUES ('one', 'cli', 'c', 'dm', 0, 1, 1)")
        raise RuntimeError("roll back")
    with store.read() as conn:
        assert conn.execute(select(routes_table.c.session_key)).all() == []


def test_a_failed_turn_statement_leaves_the_route_unbumped(store: Store) -> None:
    """The turn's one statement bumps the route before its insert fails (here: no kind): the
    bump is not committed either."""
    if store.dialect != "postgresql":
        pytest.skip("the turn's one statement is PostgreSQL's")
    key = SessionKey("k", shared=False)
    with store.write() as conn:
        inbox.record_turn(conn, turn(0), key, now=1)
    with pytest.raises(exc.IntegrityError):
        store.commit_alone(
            lambda conn: inbox.record_turn_alone(conn, turn(1), key, now=2, kind=None)  # type: ignore[arg-type]
        )
    with store.read() as conn:
        assert conn.execute(select(routes_table.c.next_seq)).scalar_one() == 1
        assert conn.execute(select(inbox_table.c.event_id)).scalars().all() == ["c1-0"]


def test_a_turn_whose_connection_died_after_it_committed_is_recorded_once(
    settings: Settings, store: Store
) -> None:
    """The connection dies after the turn's lone statement committed, before its answer came
    back: commit_alone runs it again on another connection, which finds the event (as a
    redelivery's), so the turn is in the inbox once and the route bumped once. A redelivery
    after its pooled connection was terminated is found the same way."""
    if store.dialect != "postgresql":
        pytest.skip("autocommit and its retry on a dead connection are PostgreSQL's")
    key = SessionKey("k", shared=False)
    with store.write() as conn:
        first = inbox.record_turn(conn, turn(0), key, now=1, claim_wake=True)
    runs: list[inbox.Recorded | inbox.Alone] = []

    def record_then_die(conn: Connection) -> inbox.Recorded | inbox.Alone:
        runs.append(inbox.record_turn_alone(conn, turn(1), key, now=2, claim_wake=True))
        if len(runs) == 1:  # committed (autocommit); now the backend goes before we hear back
            conn.exec_driver_sql("SELECT pg_terminate_backend(pg_backend_pid())")
        return runs[-1]

    found = store.commit_alone(record_then_die)
    assert len(runs) == 2 and isinstance(runs[0], inbox.Recorded) and not runs[0].duplicate
    assert isinstance(found, inbox.Recorded)
    assert (found.turn_id, found.seq, found.duplicate) == (runs[0].turn_id, 2, True)
    terminate(store, hold_every_connection(store))
    again = store.commit_alone(
        lambda conn: inbox.record_turn_alone(conn, turn(1), key, now=3, claim_wake=True)
    )
    assert isinstance(again, inbox.Recorded) and again.duplicate
    assert again.turn_id == found.turn_id
    with store.read() as conn:
        rows = conn.execute(select(inbox_table.c.event_id, inbox_table.c.seq)).all()
        assert conn.execute(select(routes_table.c.next_seq)).scalar_one() == 2
    assert sorted(tuple(r) for r in rows) == [("c1-0", first.seq), ("c1-1", 2)]
