"""A batch's next turn claimed in the statement that finishes the turn before it (PostgreSQL:
`inbox.finish_and_claim`), and a drain's first turn in the statement that finds it
(`inbox.next_and_claim`): marked running in the route's live session with the history the model
is given, as the search and `mark_running_with_history` left it in two round trips; and every
turn that needs a decision in Python (a command, a memory turn, one not yet due, one out of
attempts, a route with no live session or an ended one) found but left as it was. The drain
runs a batch the same on both databases."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

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
from tests.integration.storekit import pg_round_trips
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


@pytest.fixture(params=["after_a_finish", "first_of_a_drain"])
def claim(request: pytest.FixtureRequest) -> Any:
    return _claim if request.param == "after_a_finish" else _claim_first


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


def test_no_open_turn_lets_the_lease_go_in_the_finish(store: Store) -> None:
    _postgresql(store)
    lease, first, second = _two_turns(store)
    with store.write() as conn:
        inbox.finish_turn(conn, second, inbox.CANCELLED, 9)
    assert _claim(store, lease, first) == (None, None, None)
    with store.read() as conn:
        holder = conn.execute(select(routes_table.c.lease_holder)).scalar_one()
    assert holder is None


def test_a_drains_first_claim_with_no_open_turn_finds_nothing_and_keeps_the_lease(
    store: Store,
) -> None:
    """The caller lets go (`workers.drain_claim.claim_turn`): no finish here to do it in."""
    _postgresql(store)
    lease, first, second = _two_turns(store)
    with store.write() as conn:
        inbox.finish_turn(conn, second, inbox.CANCELLED, 9)
    assert _claim_first(store, lease, first) == (None, None, None)
    with store.read() as conn:
        holder = conn.execute(select(routes_table.c.lease_holder)).scalar_one()
    assert holder == "worker"


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
