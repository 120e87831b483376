"""Helpers for tests on real state.db files: raw SQLite access, FTS probes, counter checks."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Connection, text

from shared.db import Store
from shared.db import sqlite as store_sqlite
from shared.db.engine import connect
from shared.db.migrate import alembic_config
from shared.store.messages import append_message
from shared.store.sessions import create_session, end_session, require_session


def sqlite_only(store: Store, what: str) -> None:
    """Skip the PostgreSQL run of a test about something only a SQLite file has."""
    if store.dialect != "sqlite":
        pytest.skip(f"SQLite only: {what}")


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


@contextmanager
def raw(path: Path, *, timeout: float = 5.0) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection in autocommit mode, closed afterwards."""
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def fts_ids(conn: Connection, query: str) -> set[int]:
    rows = conn.execute(
        text("SELECT rowid FROM messages_fts WHERE messages_fts MATCH :q"), {"q": query}
    )
    return {int(row[0]) for row in rows}


def fts_integrity_check(conn: Connection) -> None:
    """FTS5's own check of the index against its content (raises when they disagree).
    PostgreSQL keeps its indexes itself: there is no FTS5 index to check there."""
    if conn.dialect.name != "sqlite":
        return
    conn.execute(text("INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)"))


def counter_drift(conn: Connection) -> list[str]:
    """Every way the trigger-kept counters differ from COUNT(*); empty when exact. Per
    session on both dialects; per source where `source_stats` is kept (SQLite)."""
    problems: list[str] = []
    drift = conn.execute(
        text(
            "SELECT id, message_count, actual FROM (SELECT s.id, s.message_count,"
            " (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) AS actual"
            " FROM sessions s) AS counted WHERE message_count != actual"
        )
    ).all()
    problems += [f"session {r[0]}: message_count {r[1]} != {r[2]}" for r in drift]
    if conn.dialect.name != "sqlite":
        return problems
    kept = {
        row[0]: (row[1], row[2])
        for row in conn.execute(text("SELECT source, sessions, messages FROM source_stats"))
    }
    actual = {
        row[0]: (row[1], row[2])
        for row in conn.execute(
            text(
                "SELECT s.source, COUNT(DISTINCT s.id), COUNT(m.id) FROM sessions s"
                " LEFT JOIN messages m ON m.session_id = s.id GROUP BY s.source"
            )
        )
    }
    for source in kept.keys() | actual.keys():
        have = kept.get(source, (0, 0))
        want = actual.get(source, (0, 0))
        if have != want:
            problems.append(f"source_stats[{source}] = {have}, COUNT(*) says {want}")
    return problems


def make_db_at(path: Path, revision: str) -> None:
    """A state.db at an older schema revision, made the way an older hermes-fleet made it."""
    store = connect(sqlite_url(path))
    try:
        with store.write() as conn:
            command.upgrade(alembic_config(conn), revision)
    finally:
        store.close()


def fill(store: Store, sessions: int = 3, messages: int = 4, *, prefix: str = "s") -> None:
    with store.write() as conn:
        for i in range(sessions):
            sid = f"{prefix}{i:03d}"
            create_session(conn, session_id=sid, source="cli", now=1000.0 + i, title=f"{sid} t")
            for j in range(messages):
                role = "user" if j % 2 == 0 else "assistant"
                append_message(conn, sid, role, f"{sid} message {j}", now=1000.0 + i + j)


def fill_in_segments(
    store: Store, *, sessions: int, started: float, ended: float | None, prefix: str
) -> list[str]:
    """Sessions of four English and Chinese messages each: every append leaves a segment in
    both FTS5 indexes, as turn-by-turn traffic does, until the merging inside appends (or
    maintenance) folds them together."""
    ids = []
    for i in range(sessions):
        sid = f"{prefix}_{i:06d}_abcdef"
        with store.write() as conn:
            create_session(conn, session_id=sid, source="cli", now=started)
            for j in range(4):
                text_ = f"{prefix} note {i} part {j} about the deploy " * 10 + "部署会议记录"
                append_message(conn, sid, "user", text_, now=started + j)
            if ended is not None:
                end_session(conn, sid, "idle", ended)
        ids.append(sid)
    return ids


def fts_segment_counts(store: Store) -> dict[str, int]:
    """Segments of each FTS5 index (1 once merged)."""
    with store.read() as conn:
        return {table: store_sqlite.fts_segments(conn, table) for table in store_sqlite.FTS_INDEXES}


def new(conn: Connection, sid: str, *, now: float = 1.0, source: str = "cli", **kw: Any) -> str:
    """Create session `sid` and return its id (the store tests' shorthand)."""
    create_session(conn, session_id=sid, source=source, now=now, **kw)
    return sid


def title_of(store: Store, sid: str) -> tuple[str | None, str | None]:
    with store.read() as conn:
        record = require_session(conn, sid)
    return record.title, record.title_source


@contextmanager
def pg_trace(conn: Connection, tmp: Path) -> Iterator[list[str]]:
    """PostgreSQL: libpq's protocol trace of what `conn` sends and receives inside the block,
    one message a line ("F\t…" sent, "B\t…" received); the lines are in the list afterwards."""
    from psycopg import pq

    pgconn = conn.connection.driver_connection.pgconn  # type: ignore[union-attr]
    path = tmp / f"trace-{id(conn)}.log"
    lines: list[str] = []
    with path.open("w") as handle:
        pgconn.trace(handle.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield lines
        finally:
            pgconn.untrace()
    lines += path.read_text(errors="replace").splitlines()


@contextmanager
def pg_round_trips(conn: Connection, tmp: Path) -> Iterator[list[int]]:
    """PostgreSQL: count the round trips (the server's ReadyForQuery messages, from libpq's
    protocol trace) that `conn` makes inside the block; the count is in the list afterwards."""
    counted: list[int] = []
    with pg_trace(conn, tmp) as lines:
        yield counted
    counted.append(sum(1 for line in lines if line.startswith("B\t") and "\tReadyForQuery" in line))


@contextmanager
def pg_store_round_trips(store: Store, tmp: Path) -> Iterator[list[int]]:
    """PostgreSQL: count the round trips of every connection `store` checks out of its pool
    inside the block (libpq's trace of each checkout); the count is in the list afterwards."""
    from psycopg import pq
    from sqlalchemy import event

    traced: list[tuple[Any, Any, Path]] = []

    def checkout(dbapi: Any, _record: Any, _proxy: Any) -> None:
        path = tmp / f"checkout-{len(traced)}.log"
        handle = path.open("w")
        dbapi.pgconn.trace(handle.fileno())
        dbapi.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        traced.append((dbapi, handle, path))

    def checkin(dbapi: Any, _record: Any) -> None:
        if dbapi is not None and not dbapi.closed:
            dbapi.pgconn.untrace()

    event.listen(store.engine, "checkout", checkout)
    event.listen(store.engine, "checkin", checkin)
    counted: list[int] = []
    try:
        yield counted
    finally:
        event.remove(store.engine, "checkout", checkout)
        event.remove(store.engine, "checkin", checkin)
        for dbapi, handle, _path in traced:
            if not dbapi.closed:
                dbapi.pgconn.untrace()
            handle.close()
    counted.append(
        sum(
            1
            for _dbapi, _handle, path in traced
            for line in path.read_text(errors="replace").splitlines()
            if line.startswith("B\t") and "\tReadyForQuery" in line
        )
    )
