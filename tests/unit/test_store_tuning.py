"""SQLite tuning of state.db: page size, WAL checkpoint threshold, FTS5 merge settings."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from shared.db import Store, open_store
from shared.db import sqlite as store_sqlite
from shared.store.messages import append_message
from shared.store.sessions import create_session


def _pragma(store: Store, name: str) -> int:
    with store.read() as conn:
        return int(conn.exec_driver_sql(f"PRAGMA {name}").scalar_one())


def test_new_file_gets_the_configured_page_size(store: Store) -> None:
    assert _pragma(store, "page_size") == store_sqlite.PAGE_SIZE


def test_every_connection_checkpoints_at_the_configured_wal_size(store: Store) -> None:
    pages = store_sqlite.WAL_AUTOCHECKPOINT_BYTES // store_sqlite.PAGE_SIZE
    assert _pragma(store, "wal_autocheckpoint") == pages
    assert _pragma(store, "journal_size_limit") == store_sqlite.JOURNAL_SIZE_LIMIT_BYTES


def test_existing_file_keeps_its_page_size(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA page_size = 8192")
    raw.execute("PRAGMA journal_mode = WAL")
    raw.close()
    opened = open_store(f"sqlite:///{path}")
    try:
        assert _pragma(opened, "page_size") == 8192
        assert _pragma(opened, "wal_autocheckpoint") == (
            store_sqlite.WAL_AUTOCHECKPOINT_BYTES // 8192
        )
    finally:
        opened.close()


def test_fts_merges_incrementally_inside_writes(store: Store) -> None:
    with store.read() as conn:
        config = dict(conn.exec_driver_sql("SELECT k, v FROM messages_fts_config").all())
    assert config["automerge"] == 4
    assert config["crisismerge"] == 64


def test_passive_checkpoint_copies_the_wal(store: Store) -> None:
    with store.write() as conn:
        create_session(conn, session_id="20260101_000000_abcdef", source="cli", now=1.0)
        append_message(conn, "20260101_000000_abcdef", "user", "hello there", now=2.0)
    raw = store.engine.raw_connection()
    try:
        busy, frames, copied = store_sqlite.wal_checkpoint(raw.driver_connection)
    finally:
        raw.close()
    assert busy == 0
    assert frames > 0
    assert copied == frames


def test_checkpoint_refuses_an_unknown_mode(store: Store) -> None:
    raw = store.engine.raw_connection()
    try:
        with pytest.raises(ValueError, match="unknown checkpoint mode"):
            store_sqlite.wal_checkpoint(raw.driver_connection, "NOW")
    finally:
        raw.close()


def test_merge_step_keeps_search_working(store: Store) -> None:
    with store.write() as conn:
        create_session(conn, session_id="20260101_000000_abcdef", source="cli", now=1.0)
        for i in range(20):
            append_message(conn, "20260101_000000_abcdef", "user", f"note {i} zebra", now=2.0 + i)
    with store.write() as conn:
        store_sqlite.fts_merge_step(conn, pages=50)
    with store.read() as conn:
        hits = conn.exec_driver_sql(
            "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'zebra'"
        ).scalar_one()
    assert hits == 20


def _segments_by_idx(store: Store, table: str) -> int:
    """The segment count read the slow way: the distinct segment ids of the index's b-trees."""
    with store.read() as conn:
        return int(
            conn.exec_driver_sql(f"SELECT count(DISTINCT segid) FROM {table}_idx").scalar_one()
        )


def test_segment_count_reads_the_index_structure(store: Store) -> None:
    with store.read() as conn:
        assert store_sqlite.fts_segments(conn) == 0  # a new, empty index
    with store.write() as conn:
        # No merging inside appends: every transaction below leaves its own segment.
        for table in store_sqlite.FTS_INDEXES:
            conn.exec_driver_sql(f"INSERT INTO {table}({table}, rank) VALUES ('automerge', 0)")
            conn.exec_driver_sql(f"INSERT INTO {table}({table}, rank) VALUES ('crisismerge', 1000)")
        create_session(conn, session_id="20260101_000000_abcdef", source="cli", now=1.0)
    for i in range(150):  # past 127: the count takes two bytes in the record
        with store.write() as conn:
            append_message(
                conn, "20260101_000000_abcdef", "user", f"note {i} 会议记录", now=2.0 + i
            )
    with store.read() as conn:
        counted = {
            table: store_sqlite.fts_segments(conn, table) for table in store_sqlite.FTS_INDEXES
        }
    assert counted == {table: _segments_by_idx(store, table) for table in store_sqlite.FTS_INDEXES}
    assert counted["messages_fts"] == 150
    with store.read() as conn, pytest.raises(ValueError, match="unknown FTS5 index"):
        store_sqlite.fts_segments(conn, "messages")
