"""Group commit on a real state.db: writers that queue share a transaction, each unit alone."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import (
    Column,
    Connection,
    DateTime,
    Integer,
    MetaData,
    Table,
    bindparam,
    event,
    exc,
    insert,
    text,
    update,
)

from shared.db import Store
from shared.db.group_commit import GroupCommit, GroupFailed
from shared.db.prepared import Prepared
from shared.db.schema import sessions
from shared.store import session_listing
from shared.store import sessions as session_rows

pytestmark = pytest.mark.both_databases


def _committed_ids(store: Store) -> set[str]:
    """Session ids another connection sees (so: committed)."""
    with store.read() as conn:
        return {row[0] for row in conn.execute(text("SELECT id FROM sessions"))}


def sqlite_group(store: Store) -> Path:
    """The store's file, for a test of SQLite's group commit itself (skipped elsewhere)."""
    if store.path is None:
        pytest.skip("group commit is SQLite's (one writer); PostgreSQL runs writers side by side")
    return store.path


Work = Callable[[Connection], str | None]


def _create(session_id: str) -> Callable[[Connection], str]:
    def work(conn: Connection) -> str:
        session_rows.create_session(conn, session_id=session_id, source="cli", now=1.0)
        return session_id

    return work


def _holding(session_id: str, started: threading.Event, release: threading.Event) -> Work:
    """Create a session, then keep the transaction until `release`: others queue behind it."""

    def work(conn: Connection) -> None:
        session_rows.create_session(conn, session_id=session_id, source="cli", now=1.0)
        started.set()
        assert release.wait(10)

    return work


def test_queued_writers_share_one_commit_and_each_gets_its_own_result(
    store: Store, tmp_path: Path
) -> None:
    sqlite_group(store)
    group = GroupCommit(tmp_path / "writer.lock", store.engine.connect, max_seconds=60)
    commits: list[int] = []
    event.listen(store.engine, "commit", lambda _conn: commits.append(1))
    started = threading.Event()
    release = threading.Event()

    results: dict[int, str] = {}

    def queued(n: int) -> None:
        results[n] = group.run(_create(f"s{n}"))

    first = threading.Thread(target=group.run, args=(_holding("first", started, release),))
    first.start()
    assert started.wait(10)
    others = [threading.Thread(target=queued, args=(n,)) for n in range(20)]
    for thread in others:
        thread.start()
    time.sleep(0.2)  # all twenty queue behind the open transaction
    assert _committed_ids(store) == set()  # nothing is visible before the COMMIT
    release.set()
    for thread in [first, *others]:
        thread.join(10)
    assert results == {n: f"s{n}" for n in range(20)}
    assert _committed_ids(store) == {"first", *(f"s{n}" for n in range(20))}
    assert len(commits) == 1


def test_a_failing_unit_is_rolled_back_alone(store: Store) -> None:
    started = threading.Event()
    release = threading.Event()
    errors: list[BaseException] = []

    def failing() -> None:
        def work(conn: Connection) -> None:
            session_rows.create_session(conn, session_id="dropped", source="cli", now=1.0)
            raise ValueError("this unit changes its mind")

        try:
            store.commit(work)
        except ValueError as error:
            errors.append(error)

    def inline() -> None:  # a `with` unit in the same group
        with store.write() as conn:
            session_rows.create_session(conn, session_id="kept-2", source="cli", now=1.0)

    first = threading.Thread(target=store.commit, args=(_holding("kept-1", started, release),))
    first.start()
    assert started.wait(10)
    queued = [threading.Thread(target=failing), threading.Thread(target=inline)]
    for thread in queued:
        thread.start()
    time.sleep(0.2)
    release.set()
    for thread in [first, *queued]:
        thread.join(10)
    assert [str(e) for e in errors] == ["this unit changes its mind"]
    assert _committed_ids(store) == {"kept-1", "kept-2"}


def test_later_units_see_earlier_units_writes(store: Store) -> None:
    store.commit(_create("a"))
    seen: list[bool] = []

    def later(conn: Connection) -> None:
        seen.append(session_rows.session_exists(conn, "a"))

    store.commit(later)
    assert seen == [True]


def test_a_write_inside_a_write_is_refused(store: Store) -> None:
    with store.write(), pytest.raises(RuntimeError, match=r"inside store\.write"):
        store.commit(_create("nested"))
    store.commit(_create("after"))  # the store still works
    assert _committed_ids(store) == {"after"}


def test_a_lost_transaction_fails_every_unit_of_its_group(store: Store, tmp_path: Path) -> None:
    """SQLite dropped the transaction: its units all raise, nothing of theirs is visible, and
    a unit still waiting runs in the next group."""
    sqlite_group(store)
    group = GroupCommit(tmp_path / "writer.lock", store.engine.connect, max_seconds=60)
    started = threading.Event()
    release = threading.Event()

    def breaking(conn: Connection) -> None:
        session_rows.create_session(conn, session_id="lost-b", source="cli", now=1.0)
        conn.connection.driver_connection.execute("ROLLBACK")  # type: ignore[union-attr]

    outcomes: dict[str, object] = {}

    def run(name: str, work: Work) -> None:
        try:
            group.run(work)
            outcomes[name] = "ok"
        except BaseException as error:
            outcomes[name] = type(error)

    threads = [
        threading.Thread(target=run, args=("a", _holding("lost-a", started, release))),
        threading.Thread(target=run, args=("b", breaking)),
        threading.Thread(target=run, args=("c", _create("next-group"))),
    ]
    threads[0].start()
    assert started.wait(10)
    for thread in threads[1:]:
        thread.start()
        time.sleep(0.1)  # queued in this order
    release.set()
    for thread in threads:
        thread.join(10)
    assert outcomes == {"a": GroupFailed, "b": GroupFailed, "c": "ok"}
    assert issubclass(GroupFailed, exc.OperationalError)  # tasks retry it like a busy database
    assert _committed_ids(store) == {"next-group"}


def test_hot_statements_raise_as_core_would(store: Store) -> None:
    store.commit(_create("dup"))
    add = Prepared(
        insert(sessions).values(id=text("'dup'"), source="cli", started_at=1.0, last_active_at=1.0)
    )
    with pytest.raises(exc.IntegrityError), store.write() as conn:
        add.rowcount(conn, {})
    store.commit(_create("still-writable"))
    assert _committed_ids(store) == {"dup", "still-writable"}


def test_a_statement_whose_values_need_converting_is_refused() -> None:
    table = Table("t", MetaData(), Column("id", Integer), Column("at", DateTime))
    with pytest.raises(TypeError, match="need converting"):
        Prepared(update(table).values(at=bindparam("b_at")))


def _changing_its_mind(conn: Connection) -> None:
    session_rows.create_session(conn, session_id="dropped", source="cli", now=1.0)
    raise ValueError("this unit changes its mind")


def test_units_queued_at_once_share_one_commit_and_fail_alone(store: Store, tmp_path: Path) -> None:
    sqlite_group(store)
    group = GroupCommit(tmp_path / "writer.lock", store.engine.connect, max_seconds=60)
    commits: list[int] = []
    event.listen(store.engine, "commit", lambda _conn: commits.append(1))
    outcomes = group.run_many([_create("a"), _changing_its_mind, _create("b")])
    assert outcomes[0] == "a" and outcomes[2] == "b"
    assert isinstance(outcomes[1], ValueError)
    assert _committed_ids(store) == {"a", "b"}
    assert len(commits) == 1


def test_units_queued_at_once_join_the_open_group(store: Store, tmp_path: Path) -> None:
    sqlite_group(store)
    group = GroupCommit(tmp_path / "writer.lock", store.engine.connect, max_seconds=60)
    commits: list[int] = []
    event.listen(store.engine, "commit", lambda _conn: commits.append(1))
    started = threading.Event()
    release = threading.Event()
    outcomes: list[object] = []
    first = threading.Thread(target=group.run, args=(_holding("first", started, release),))
    first.start()
    assert started.wait(10)
    queued = threading.Thread(
        target=lambda: outcomes.extend(group.run_many([_create(f"s{n}") for n in range(5)]))
    )
    queued.start()
    time.sleep(0.2)  # queued behind the open transaction: nothing of theirs is visible yet
    assert _committed_ids(store) == set() and outcomes == []
    release.set()
    for thread in (first, queued):
        thread.join(10)
    assert outcomes == [f"s{n}" for n in range(5)]
    assert _committed_ids(store) == {"first", *(f"s{n}" for n in range(5))}
    assert len(commits) == 1


def test_a_lost_transaction_is_an_error_for_each_of_its_units_queued_at_once(
    store: Store, tmp_path: Path
) -> None:
    sqlite_group(store)
    group = GroupCommit(tmp_path / "writer.lock", store.engine.connect)

    def breaking(conn: Connection) -> None:
        session_rows.create_session(conn, session_id="lost-b", source="cli", now=1.0)
        conn.connection.driver_connection.execute("ROLLBACK")  # type: ignore[union-attr]

    outcomes = group.run_many([_create("lost-a"), breaking, _create("next-group")])
    assert [type(outcome) for outcome in outcomes[:2]] == [GroupFailed, GroupFailed]
    assert outcomes[2] == "next-group"
    assert _committed_ids(store) == {"next-group"}


def test_store_commit_each_records_each_unit_alone_in_one_transaction(store: Store) -> None:
    outcomes = store.commit_each([_create("a"), _changing_its_mind, _create("b")])
    assert outcomes[0] == "a" and outcomes[2] == "b"
    assert isinstance(outcomes[1], ValueError)
    assert _committed_ids(store) == {"a", "b"}


def test_store_commit_each_on_postgresql_records_each_unit_alone(postgres_url: str) -> None:
    from shared.db import open_store

    store = open_store(postgres_url.replace("postgresql://", "postgresql+psycopg://", 1))
    run = uuid.uuid4().hex
    try:
        outcomes = store.commit_each(
            [_create(f"{run}-a"), _failing(f"{run}-x"), _create(f"{run}-b")]
        )
        with store.read() as conn:
            kept = {
                row[0]
                for row in conn.execute(
                    text("SELECT id FROM sessions WHERE id LIKE :run"), {"run": f"{run}-%"}
                )
            }
    finally:
        store.close()
    assert outcomes[0] == f"{run}-a" and outcomes[2] == f"{run}-b"
    assert isinstance(outcomes[1], ValueError)
    assert kept == {f"{run}-a", f"{run}-b"}


def _failing(session_id: str) -> Callable[[Connection], None]:
    def work(conn: Connection) -> None:
        session_rows.create_session(conn, session_id=session_id, source="cli", now=1.0)
        raise ValueError("this unit changes its mind")

    return work


def test_a_closed_store_keeps_no_descriptor_open(tmp_path: Path) -> None:
    """Each store opened, written and closed used to leave its writers' lock file open: a
    long-lived process (the test suite) ran past the 1,024 descriptors select() takes."""
    import os

    from shared.db import open_store

    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    url = f"sqlite:///{tmp_path / 'state.db'}"
    first = open_store(url)
    with first.write() as conn:
        session_rows.create_session(conn, session_id="s0", source="cli", now=1.0)
    first.close()
    before = descriptors()
    for n in range(1, 21):
        again = open_store(url)
        with again.write() as conn:
            session_rows.create_session(conn, session_id=f"s{n}", source="cli", now=1.0)
        again.close()
    assert descriptors() == before
    reopened = open_store(url)
    with reopened.read() as conn:
        assert len(session_listing.list_sessions(conn, limit=50)[0]) == 21
    reopened.close()


def test_the_writers_connection_is_kept_from_group_to_group_until_one_is_lost(
    store: Store, tmp_path: Path
) -> None:
    """Checking the writers' connection out and back in for every group cost more than its
    BEGIN: one connection serves group after group, and a lost group's goes with it."""
    sqlite_group(store)
    group = GroupCommit(tmp_path / "writer.lock", store.engine.connect)
    seen: list[Connection] = []

    def noting(session_id: str) -> Work:
        def work(conn: Connection) -> str:
            seen.append(conn)
            return _create(session_id)(conn)

        return work

    def breaking(conn: Connection) -> None:
        seen.append(conn)
        conn.connection.driver_connection.execute("ROLLBACK")  # type: ignore[union-attr]

    group.run(noting("one"))
    group.run(noting("two"))
    with pytest.raises(GroupFailed):
        group.run(breaking)
    group.run(noting("three"))
    assert seen[0] is seen[1] is seen[2]
    assert seen[3] is not seen[0]
    group.close()
    assert seen[3].closed
    assert _committed_ids(store) == {"one", "two", "three"}


def test_values_bound_in_a_given_order_land_in_their_columns(store: Store) -> None:
    """`all_in_order` (a multi-row INSERT's binds, by position on SQLite) puts each value
    where its name says, whatever order the names come in."""
    rows = 3
    add = Prepared(
        insert(sessions)
        .values(
            [
                {
                    "id": bindparam(f"id_{n}"),
                    "source": bindparam(f"source_{n}"),
                    "started_at": bindparam(f"at_{n}"),
                    "last_active_at": bindparam(f"at_{n}"),
                }
                for n in range(rows)
            ]
        )
        .returning(sessions.c.id, sessions.c.source)
    )
    names = [f"{c}_{n}" for c in ("source", "at", "id") for n in reversed(range(rows))]
    values = {f"id_{n}": f"s{n}" for n in range(rows)}
    values |= {f"source_{n}": f"src{n}" for n in range(rows)}
    values |= {f"at_{n}": float(n) for n in range(rows)}
    for _ in range(2):  # the second run reuses what the first worked out
        with store.write() as conn:
            conn.execute(text("DELETE FROM sessions"))
            returned = add.all_in_order(conn, names, [values[name] for name in names])
        assert sorted((r["id"], r["source"]) for r in returned) == [
            (f"s{n}", f"src{n}") for n in range(rows)
        ]
        with store.read() as conn:
            stored = conn.execute(text("SELECT id, source, started_at FROM sessions")).all()
        assert sorted(tuple(r) for r in stored) == [
            (f"s{n}", f"src{n}", float(n)) for n in range(rows)
        ]
