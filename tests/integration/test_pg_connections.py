"""PostgreSQL's connections (shared/db/pg_pool.py): a fixed pool, reads that are READ ONLY and
keep psycopg's prepared statements, and a BEGIN that replaces pool_pre_ping as the liveness check
(backends terminated under a full pool cost the callers nothing).

The pool, the BEGIN and prepared statements are PostgreSQL's alone: on SQLite these skip.
Terminating backends touches only the pids of this test's own store's connections.
"""

from __future__ import annotations

import gc
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import psycopg
import pytest
from sqlalchemy import exc, select, text, update

from shared.db import Connection, Store, open_store
from shared.db.pg_pool import PG_POOL_SIZE, WRITE_IDLE_TIMEOUT, pg_engine
from shared.db.schema import sessions
from shared.settings import Settings
from shared.store.sessions import create_session, get_session

pytestmark = pytest.mark.both_databases


def postgres_only(store: Store) -> None:
    if store.dialect != "postgresql":
        pytest.skip("the connection pool and BEGIN READ ONLY are PostgreSQL's")


def backend_pid(conn: Connection) -> int:
    raw: Any = conn.connection.driver_connection
    return int(raw.info.backend_pid)


def hold_every_connection(store: Store) -> list[int]:
    """Open the pool's every connection at once (reads in one thread); their backends' pids."""
    with ExitStack() as held:
        return [backend_pid(held.enter_context(store.read())) for _ in range(PG_POOL_SIZE)]


def terminate(store: Store, pids: list[int]) -> None:
    """pg_terminate_backend on exactly `pids` (this store's own), then wait until they are gone."""
    url = store.engine.url.set(query={}).render_as_string(hide_password=False)
    with psycopg.connect(url, autocommit=True) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 30
        while admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)
        ).fetchone() != (0,):
            assert time.monotonic() < deadline, "terminated backends still listed after 30 s"
            time.sleep(0.05)


def test_the_pool_is_fixed(store: Store) -> None:
    postgres_only(store)
    assert store.engine.pool.size() == PG_POOL_SIZE  # type: ignore[attr-defined]
    pids = hold_every_connection(store)
    assert len(set(pids)) == PG_POOL_SIZE
    small = Store(
        pg_engine(str(store.engine.url.render_as_string(False)), pool_size=2, pool_timeout=0.2),
        None,
    )
    try:
        with small.read(), small.read():
            started = time.monotonic()
            with pytest.raises(exc.TimeoutError), small.read():
                pass  # no overflow: a third waits for one of the two, then gives up
            assert time.monotonic() - started < 5
    finally:
        small.close()


def test_a_write_inside_read_is_refused(store: Store) -> None:
    postgres_only(store)
    with pytest.raises(exc.DBAPIError, match="read-only transaction"), store.read() as conn:
        create_session(conn, session_id="s1", source="cli", now=1.0)
    with store.read() as conn:
        assert get_session(conn, "s1") is None
    with store.write() as conn:  # the connection went back to the pool in a usable state
        create_session(conn, session_id="s1", source="cli", now=1.0)
    with store.read() as conn:
        assert get_session(conn, "s1") is not None


def test_a_write_left_idle_is_ended_by_the_server_and_frees_its_rows(store: Store) -> None:
    """A host cut off inside a write must not hold its row locks for hours (until TCP gives
    up): the server ends a write idle for WRITE_IDLE_TIMEOUT, so the row is free again and the
    stalled write commits nothing. Reads are not limited (an export may stream slowly)."""
    postgres_only(store)
    with store.write() as conn:
        create_session(conn, session_id="s1", source="cli", now=1.0)
    timeout = float(WRITE_IDLE_TIMEOUT.removesuffix("s"))
    locked = threading.Event()
    outcome: list[BaseException | None] = []

    def stalled_writer() -> None:
        try:
            with store.write() as conn:
                conn.execute(update(sessions).where(sessions.c.id == "s1").values(title="stale"))
                locked.set()
                time.sleep(timeout + 3)  # the client goes silent, holding the row
            outcome.append(None)
        except BaseException as error:  # the failure is the point
            outcome.append(error)

    with store.read() as idle_read:  # open, and left idle, the whole time
        writer = threading.Thread(target=stalled_writer)
        writer.start()
        assert locked.wait(30)
        with store.write() as conn:  # waits on the row until the server ends the stalled write
            conn.execute(update(sessions).where(sessions.c.id == "s1").values(title="fresh"))
        writer.join(60)
        assert len(outcome) == 1 and isinstance(outcome[0], exc.DBAPIError), outcome
        # The read was idle as long as the write and longer: not ended, and sees the new title.
        assert idle_read.execute(select(sessions.c.title)).scalar() == "fresh"


def test_reads_keep_the_statements_psycopg_prepared(store: Store) -> None:
    """A ROLLBACK makes psycopg forget (and DEALLOCATE) what it prepared; reads end in COMMIT,
    so a statement read once per transaction gets prepared and stays so."""
    postgres_only(store)
    with store.write() as conn:
        create_session(conn, session_id="s1", source="cli", now=1.0)
    query = select(sessions.c.id).where(sessions.c.id == "s1")
    for _ in range(8):  # past psycopg's prepare threshold (5)
        with store.read() as conn:
            assert conn.execute(query).scalar() == "s1"
    with store.read() as conn:
        prepared = conn.execute(
            text("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE :q"),
            {"q": "SELECT sessions.id %"},
        ).scalar()
    assert prepared == 1


def test_terminated_backends_cost_the_next_units_of_work_nothing(store: Store) -> None:
    """Every pooled connection dead (as after a PostgreSQL restart): with no pre-ping, the
    BEGIN finds each dead one, and every read and write still runs, on new backends."""
    postgres_only(store)
    with store.write() as conn:
        create_session(conn, session_id="before", source="cli", now=1.0)
    before = hold_every_connection(store)
    terminate(store, before)
    with store.write() as conn:
        create_session(conn, session_id="after", source="cli", now=2.0)
    with store.read() as conn:
        assert get_session(conn, "before") is not None
        assert get_session(conn, "after") is not None
    after = hold_every_connection(store)
    assert not set(after) & set(before)
    terminate(store, after)
    for n in range(PG_POOL_SIZE + 2):  # reads too find their dead connections and go on
        with store.read() as conn:
            assert get_session(conn, "after") is not None, n


@contextmanager
def no_connection_left_open() -> Iterator[None]:
    """Fails when a driver connection the block dropped is freed while still open (psycopg's
    ResourceWarning, raised by the collector in whatever test it happens to run in)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        yield
        gc.collect()
    left = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert left == []


def test_a_store_closed_inside_a_read_leaves_no_connection_open(settings: Settings) -> None:
    with no_connection_left_open():
        store = open_store(settings.resolved_database_url)
        with store.read() as conn:
            conn.execute(select(sessions.c.id)).all()
            store.close()


def test_a_store_closed_while_another_thread_writes_leaves_no_connection_open(
    settings: Settings,
) -> None:
    """A worker's lease renewer (or any thread) can be inside a write when its store is closed:
    that write still commits, and its connection is closed, not left in the closed pool."""
    with no_connection_left_open():
        store = open_store(settings.resolved_database_url)
        inside, closed = threading.Event(), threading.Event()
        outcome: list[BaseException | None] = []

        def write() -> None:
            try:
                with store.write() as conn:
                    create_session(conn, session_id="s1", source="cli", now=1.0)
                    inside.set()
                    assert closed.wait(30)
                outcome.append(None)
            except BaseException as error:  # reported below
                outcome.append(error)

        writer = threading.Thread(target=write)
        writer.start()
        assert inside.wait(30)
        store.close()
        closed.set()
        writer.join(30)
        assert outcome == [None]
    reopened = open_store(settings.resolved_database_url)
    try:
        with reopened.read() as conn:
            assert get_session(conn, "s1") is not None
    finally:
        reopened.close()


def test_a_closed_store_refuses_every_unit_of_work(settings: Settings) -> None:
    """Closing disposes the engine, and SQLAlchemy would put a new pool behind it at the next
    use, whose connections nothing would ever close: a closed store refuses instead, changing
    nothing, and closing it again is harmless."""
    store = open_store(settings.resolved_database_url)
    with store.write() as conn:
        create_session(conn, session_id="kept", source="cli", now=1.0)
    store.close()
    assert store.closed
    attempts: list[Any] = [
        lambda: store.read().__enter__(),
        lambda: store.write().__enter__(),
        lambda: store.commit(
            lambda conn: create_session(conn, session_id="x", source="cli", now=2.0)
        ),
        lambda: store.commit_each([lambda conn: None]),
    ]
    for attempt in attempts:
        with pytest.raises(RuntimeError, match="closed"):
            attempt()
    assert store.engine.pool.checkedout() == 0
    store.close()
    reopened = open_store(settings.resolved_database_url)
    try:
        with reopened.read() as conn:
            assert get_session(conn, "kept") is not None
            assert get_session(conn, "x") is None
    finally:
        reopened.close()
