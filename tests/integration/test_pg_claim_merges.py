"""A batch's next turn claimed in the statement that finishes the turn before it (PostgreSQL:
`inbox.finish_and_claim`), and a drain's first turn in the statement that finds it
(`inbox.next_and_claim`) or that also takes the key's lease (`inbox.take_and_claim`): marked
running in the route's live session with the history the model
is given, as the search and `mark_running_with_history` left it in two round trips; and every
turn that needs a decision in Python (a command, a memory turn, one not yet due, one out of
attempts, a route with no live session or an ended one) found but left as it was. The drain
runs a batch the same on both databases."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text, update

from producers.intake import accept
from shared.db import Store
from shared.db.schema import inbox as inbox_table
from shared.db.schema import routes as routes_table
from shared.pipeline import inbox, route_sessions, routes
from shared.pipeline.leases import Lease
from shared.session_key import SessionKey
from shared.settings import Settings
from shared.store import messages
from shared.store.housekeeping import MEMORY_FLUSH
from shared.store.sessions import create_session, end_session
from tests.integration.storekit import pg_round_trips, pg_store_round_trips
from tests.pipeline_helpers import ScriptedAgent, make_runtime, turn
from workers.agent.base import AgentRequest
from workers.drain import drain

pytestmark = pytest.mark.both_databases

MAX_ATTEMPTS = 3
HISTORY = 3


def _postgresql(store: Store) -> None:
    if store.dialect != "postgresql":
        pytest.skip("SQLite claims with a statement per step (one writer: no round trips)")


def _two_turns(store: Store) -> tuple[Lease, int, int]:
    """Key k attached to session s1 (five messages), its first turn running under a lease and
    a second one waiting: (lease, first turn's id, second's)."""
    key = SessionKey("k", shared=False)
    with store.write() as conn:
        create_session(conn, session_id="s1", source="cli", now=1)
        rows = [messages.NewRow("user", f"m{n}", 1 + n) for n in range(5)]
        messages.append_messages(conn, "s1", rows)
        first = inbox.record_turn(conn, turn(0), key, now=7).turn_id
        second = inbox.record_turn(conn, turn(1), key, now=8).turn_id
        route_sessions.attach(conn, "k", "s1", 8)
        lease = routes.acquire_route(conn, "k", "worker", now=9, ttl=30)
        assert lease is not None
        inbox.mark_running(conn, first, "s1", 9)
    return lease, first, second


def _claim(store: Store, lease: Lease, finished: int, tmp: Path | None = None) -> Any:
    with store.write() as conn:
        routes.check_route(conn, lease, 10, 30)
        if tmp is None:
            return inbox.finish_and_claim(
                conn, (finished, inbox.DONE, None), 10, lease, None,
                max_attempts=MAX_ATTEMPTS, history=HISTORY,
            )  # fmt: skip
        with pg_round_trips(conn, tmp) as trips:
            claimed = inbox.finish_and_claim(
                conn, (finished, inbox.DONE, None), 10, lease, None,
                max_attempts=MAX_ATTEMPTS, history=HISTORY,
            )  # fmt: skip
        assert trips == [1]
        return claimed


def _claim_first(store: Store, lease: Lease, finished: int, tmp: Path | None = None) -> Any:
    """`finished` done in a write of its own, then the next turn claimed as a drain's first
    is, in the write that checked the lease (as `workers.drain_claim.claim_next`)."""
    with store.write() as conn:
        inbox.finish_turn(conn, finished, inbox.DONE, 10)
    with store.write() as conn:
        routes.check_route(conn, lease, 10, 30)
        if tmp is None:
            return inbox.next_and_claim(conn, 10, lease, max_attempts=MAX_ATTEMPTS, history=HISTORY)
        with pg_round_trips(conn, tmp) as trips:
            claimed = inbox.next_and_claim(
                conn, 10, lease, max_attempts=MAX_ATTEMPTS, history=HISTORY
            )
        assert trips == [1]
        return claimed


def _claim_taking(store: Store, lease: Lease, finished: int, tmp: Path | None = None) -> Any:
    """`finished` done and the lease let go, as a drain that ended; then a new drain takes the
    lease and claims the next turn in one statement sent alone."""
    with store.write() as conn:
        inbox.finish_turn(conn, finished, inbox.DONE, 10)
        routes.release_route(conn, lease)

    def take(conn: Any) -> Any:
        return inbox.take_and_claim(
            conn, "k", "next-worker", 10, 30, max_attempts=MAX_ATTEMPTS, history=HISTORY
        )

    if tmp is None:
        taken, claimed = store.commit_alone(take)
    else:
        with pg_store_round_trips(store, tmp) as trips:
            taken, claimed = store.commit_alone(take)
        assert trips == [1]
    assert taken is not None and taken.fence == lease.fence + 1
    return claimed


@pytest.fixture(params=["after_a_finish", "first_of_a_drain", "taking_the_lease"])
def claim(request: pytest.FixtureRequest) -> Any:
    return {"after_a_finish": _claim, "first_of_a_drain": _claim_first}.get(
        request.param, _claim_taking
    )


def _row(store: Store, turn_id: int) -> tuple[Any, ...]:
    columns = (inbox_table.c.status, inbox_table.c.attempts, inbox_table.c.session_id)
    with store.read() as conn:
        found = conn.execute(select(*columns, inbox_table.c.started_at).where(
            inbox_table.c.id == turn_id
        )).one()  # fmt: skip
    return tuple(found)


def test_the_next_turn_is_marked_running_with_its_history_in_the_statement_that_finds_it(
    store: Store, tmp_path: Path, claim: Any
) -> None:
    _postgresql(store)
    lease, first, second = _two_turns(store)
    found, route, history = claim(store, lease, first, tmp_path)
    assert found is not None and found.id == second
    assert route is not None and inbox.live_session(route) is not None
    assert route["live_id"] == "s1" and route["live_message_count"] == 5
    with store.read() as conn:
        assert history == messages.last_messages(conn, "s1", HISTORY)
    assert history is not None and [m.content for m in history] == ["m2", "m3", "m4"]
    assert [type(m.timestamp) for m in history] == [float] * 3  # stored 3, 4, 5: still floats
    assert _row(store, second) == (inbox.RUNNING, 1, "s1", 10)
    assert _row(store, first)[0] == inbox.DONE


def test_a_session_with_no_message_yet_gives_an_empty_history(store: Store, claim: Any) -> None:
    _postgresql(store)
    key = SessionKey("k", shared=False)
    with store.write() as conn:
        create_session(conn, session_id="s1", source="cli", now=1)
        first = inbox.record_turn(conn, turn(0), key, now=7).turn_id
        second = inbox.record_turn(conn, turn(1), key, now=8).turn_id
        route_sessions.attach(conn, "k", "s1", 8)
        lease = routes.acquire_route(conn, "k", "worker", now=9, ttl=30)
        assert lease is not None
    found, _route, history = claim(store, lease, first)
    assert found is not None and found.id == second and history == []
    assert _row(store, second)[:2] == (inbox.RUNNING, 1)


def _command(conn: Any, turn_id: int) -> None:
    conn.execute(update(inbox_table).where(inbox_table.c.id == turn_id).values(kind="command"))


def _memory(conn: Any, turn_id: int) -> None:
    conn.execute(update(inbox_table).where(inbox_table.c.id == turn_id).values(kind=MEMORY_FLUSH))


def _not_due(conn: Any, turn_id: int) -> None:
    conn.execute(update(inbox_table).where(inbox_table.c.id == turn_id).values(not_before=60))


def _out_of_attempts(conn: Any, turn_id: int) -> None:
    values = {"attempts": MAX_ATTEMPTS}
    conn.execute(update(inbox_table).where(inbox_table.c.id == turn_id).values(**values))


def _no_live_session(conn: Any, turn_id: int) -> None:
    conn.execute(routes_table.update().values(session_id=None))


def _ended(conn: Any, turn_id: int) -> None:
    assert end_session(conn, "s1", "reset", 9)


@pytest.mark.parametrize(
    "make", [_command, _memory, _not_due, _out_of_attempts, _no_live_session, _ended]
)
def test_a_turn_that_needs_a_decision_is_found_but_left_as_it_was(
    store: Store, make: Any, claim: Any
) -> None:
    _postgresql(store)
    lease, first, second = _two_turns(store)
    with store.write() as conn:
        make(conn, second)
    before = _row(store, second)
    found, route, history = claim(store, lease, first)
    assert found is not None and found.id == second and route is not None
    assert history is None
    assert _row(store, second) == before and before[0] == inbox.WAITING


@pytest.mark.parametrize(
    ("claiming", "holder"),
    [(_claim, None), (_claim_first, "worker")],
    ids=["a_finish_lets_it_go", "a_drains_first_claim_leaves_it_to_its_caller"],
)
def test_no_open_turn_and_the_lease(store: Store, claiming: Any, holder: str | None) -> None:
    """A finish lets the lease go in its statement; a drain's first claim has no finish to do
    it in, and its caller lets go (`workers.drain_claim.claim_turn`)."""
    _postgresql(store)
    lease, first, second = _two_turns(store)
    with store.write() as conn:
        inbox.finish_turn(conn, second, inbox.CANCELLED, 9)
    assert claiming(store, lease, first) == (None, None, None)
    with store.read() as conn:
        assert conn.execute(select(routes_table.c.lease_holder)).scalar_one() == holder


def _route(store: Store) -> tuple[Any, ...]:
    columns = (routes_table.c.lease_holder, routes_table.c.fence, routes_table.c.wake_sent_at)
    with store.read() as conn:
        return tuple(conn.execute(select(*columns)).one())


def test_taking_a_busy_lease_claims_nothing(store: Store) -> None:
    _postgresql(store)
    _lease, _first, second = _two_turns(store)  # held by "worker" until 39
    before, route = _row(store, second), _route(store)
    taken = store.commit_alone(
        lambda conn: inbox.take_and_claim(
            conn, "k", "other", 10, 30, max_attempts=MAX_ATTEMPTS, history=HISTORY
        )
    )
    assert taken == (None, (None, None, None))
    assert _row(store, second) == before and _route(store) == route


def test_taking_the_lease_of_a_key_with_no_open_turn_lets_it_go_at_once(store: Store) -> None:
    """As an acquire and a release would: the fence moves and the wake claim clears, so the
    key's next arrival sends a wake-up."""
    _postgresql(store)
    lease, first, second = _two_turns(store)
    with store.write() as conn:
        inbox.finish_turn(conn, first, inbox.DONE, 9)
        inbox.finish_turn(conn, second, inbox.CANCELLED, 9)
        routes.release_route(conn, lease)
        conn.execute(routes_table.update().values(wake_sent_at=9))
    taken, claimed = store.commit_alone(
        lambda conn: inbox.take_and_claim(
            conn, "k", "next-worker", 10, 30, max_attempts=MAX_ATTEMPTS, history=HISTORY
        )
    )
    assert taken is not None and claimed == (None, None, None)
    assert _route(store) == (None, lease.fence + 1, None)


def test_a_turn_finished_while_the_take_waited_for_the_route_is_not_claimed_again(
    store: Store,
) -> None:
    """The take's search reads the snapshot its statement began with. Here that statement
    begins while the key's holder, its lease run out (40 > 39) but not yet taken over, is
    finishing the last open turn (route row locked), and waits; the holder commits the turn
    done and lets the lease go. The turn still looks open
    in the take's snapshot, but marking reads the turn's row as committed: it is found, left
    as it is (the caller claims afresh and finds nothing), never run twice."""
    _postgresql(store)
    lease, first, second = _two_turns(store)
    with store.write() as conn:
        inbox.finish_turn(conn, first, inbox.DONE, 9)
        inbox.mark_running(conn, second, "s1", 9)
    result: list[Any] = []

    def take() -> None:
        result.append(
            store.commit_alone(
                lambda conn: inbox.take_and_claim(
                    conn, "k", "next-worker", 40, 30, max_attempts=MAX_ATTEMPTS, history=HISTORY
                )
            )
        )

    with store.write() as conn:  # the holder's last write: its route row locked first
        routes.check_route(conn, lease, 10, 30)
        taker = threading.Thread(target=take)
        taker.start()
        _wait_for_a_lock_wait(store)
        inbox.finish_turn(conn, second, inbox.DONE, 10)
        routes.release_route(conn, lease)
    taker.join(30)
    taken, (found, _route_state, history) = result[0]
    assert taken is not None and found is not None and found.id == second
    assert history is None  # not marked: claimed afresh by the caller, which finds nothing
    assert _row(store, second)[:2] == (inbox.DONE, 1)


def _wait_for_a_lock_wait(store: Store) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with store.read() as conn:
            waiting = conn.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
            ).scalar_one()
        if waiting:
            return
        time.sleep(0.02)
    raise AssertionError("the take never waited for the route row")


def test_each_turn_of_a_batch_is_given_the_history_its_claim_read(
    settings: Settings, store: Store
) -> None:
    """Both databases: four turns drained in one batch, each request's history the session's
    messages up to the turn before it (on PostgreSQL the last three claimed with a finish)."""
    given: list[list[str | None]] = []

    def reply(request: AgentRequest) -> str:
        given.append([m.content for m in request.history])
        return f"re {request.turn.text}"

    rt, _ = make_runtime(settings, store, ScriptedAgent(reply=reply))
    key = ""
    for n in range(4):
        key = accept(store, rt.waker, turn(n), settings=settings, clock=time.time).session_key
    assert drain(rt, key).ran == 4
    said = [text for n in range(4) for text in (f"message {n}", f"re message {n}")]
    assert given == [said[: 2 * n] for n in range(4)]
    with store.read() as conn:
        statuses = conn.execute(select(inbox_table.c.status, inbox_table.c.attempts)).all()
    assert [tuple(row) for row in statuses] == [(inbox.DONE, 1)] * 4
