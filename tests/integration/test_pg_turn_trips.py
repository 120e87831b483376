"""What a turn's writes cost PostgreSQL in round trips, and that the merged statements behave as
the statements they replace (both databases: SQLite runs the statement-per-step path)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from shared.db import Store
from shared.db.schema import routes as routes_table
from shared.pipeline import inbox, routes
from shared.pipeline.leases import Lease
from shared.session_key import SessionKey
from tests.integration.storekit import pg_round_trips
from tests.pipeline_helpers import turn

pytestmark = pytest.mark.both_databases


def _finish_and_next(
    store: Store, tmp: Path, turn_id: int, status: str, error: str | None, lease: Lease
) -> inbox.TurnRow | None:
    with store.write() as conn:
        routes.check_route(conn, lease, 10, 30)  # as every fenced write begins
        if store.dialect != "postgresql":
            return inbox.finish_and_next(conn, turn_id, status, 10, error, lease)
        with pg_round_trips(conn, tmp) as trips:
            following = inbox.finish_and_next(conn, turn_id, status, 10, error, lease)
        assert trips == [1]
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
        assert inbox.finish_and_next(conn, only.turn_id, inbox.DONE, 6, None, old) is None
        holder = conn.execute(select(routes_table.c.lease_holder)).scalar_one()
    assert holder == "new"
