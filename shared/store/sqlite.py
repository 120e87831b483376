"""Everything SQLite-only: connection PRAGMAs, BEGIN IMMEDIATE, file modes, FTS5 and counter DDL."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event

from shared.store.errors import StoreError

SQLITE_HEADER = b"SQLite format 3\x00"
BUSY_TIMEOUT_MS = 10_000
# Tool output can be megabytes; the full text stays in `messages`, the index sees this much.
FTS_TOOL_OUTPUT_CAP = 4000
# Execution option read by the `begin` hook: writers take the write lock up front.
BEGIN_OPTION = "hermes_begin"


def prepare_file(path: Path) -> None:
    """Create HERMES_HOME and an empty 0600 state.db if missing; refuse a non-SQLite file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise StoreError(f"cannot create {path.parent}: {exc.strerror or exc}") from None
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise StoreError(f"{path.parent} is not writable; state.db needs a writable HERMES_HOME")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        _check_header(path)
    except OSError as exc:
        raise StoreError(f"cannot create {path}: {exc.strerror or exc}") from None
    else:
        os.close(fd)
    secure_files(path)


def _check_header(path: Path) -> None:
    try:
        with path.open("rb") as handle:
            head = handle.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from None
    if head and head != SQLITE_HEADER:
        raise StoreError(f"{path} is not a SQLite database; move it aside or set HERMES_HOME")


def secure_files(path: Path) -> None:
    """state.db, -wal and -shm readable by their owner only (SQLite copies the main file's mode)."""
    for candidate in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        try:
            if candidate.exists() and (candidate.stat().st_mode & 0o077):
                candidate.chmod(0o600)
        except OSError:
            continue


def install_hooks(engine: Engine) -> None:
    """PRAGMAs on every new connection; our own BEGIN so writers can say IMMEDIATE."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # the driver must not start transactions itself
        cursor = dbapi_conn.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = cursor.execute("PRAGMA journal_mode").fetchone()[0]
            if mode != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.execute("PRAGMA temp_store = MEMORY")
            cursor.execute("PRAGMA cache_size = -16000")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get(BEGIN_OPTION, "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")


def is_not_a_database(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "file is not a database" in text or "malformed" in text


# --- DDL used by migrations (kept here so callers never see SQLite-only SQL) ---

FTS_SOURCE_VIEW = f"""
CREATE VIEW messages_fts_source AS
SELECT id,
       CASE WHEN role = 'tool' THEN substr(content, 1, {FTS_TOOL_OUTPUT_CAP}) ELSE content END
         AS content
FROM messages
"""

FTS_TABLE = """
CREATE VIRTUAL TABLE messages_fts USING fts5(
    content,
    content = 'messages_fts_source',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
)
"""

_INDEXED = (
    f"CASE WHEN {{row}}.role = 'tool' THEN substr({{row}}.content, 1, {FTS_TOOL_OUTPUT_CAP}) "
    "ELSE {row}.content END"
)

FTS_TRIGGERS = [
    f"""
CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages WHEN new.content IS NOT NULL BEGIN
  INSERT INTO messages_fts(rowid, content) VALUES (new.id, {_INDEXED.format(row="new")});
END""",
    f"""
CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages WHEN old.content IS NOT NULL BEGIN
  INSERT INTO messages_fts(messages_fts, rowid, content)
  VALUES ('delete', old.id, {_INDEXED.format(row="old")});
END""",
    f"""
CREATE TRIGGER messages_fts_au AFTER UPDATE OF content, role ON messages BEGIN
  INSERT INTO messages_fts(messages_fts, rowid, content)
  SELECT 'delete', old.id, {_INDEXED.format(row="old")} WHERE old.content IS NOT NULL;
  INSERT INTO messages_fts(rowid, content)
  SELECT new.id, {_INDEXED.format(row="new")} WHERE new.content IS NOT NULL;
END""",
]

# FTS5 merges segments as part of ordinary inserts ("automerge"); a large merge inside one
# append is how a chat turn stalls for seconds. Keep per-insert merging small and bounded;
# `fts_merge_step` does the rest from maintenance.
FTS_TUNING = [
    "INSERT INTO messages_fts(messages_fts, rank) VALUES ('automerge', 4)",
    "INSERT INTO messages_fts(messages_fts, rank) VALUES ('crisismerge', 64)",
]

COUNTER_TRIGGERS = [
    """
CREATE TRIGGER messages_count_ai AFTER INSERT ON messages BEGIN
  UPDATE sessions SET message_count = message_count + 1 WHERE id = new.session_id;
END""",
    """
CREATE TRIGGER messages_count_ad AFTER DELETE ON messages BEGIN
  UPDATE sessions SET message_count = message_count - 1 WHERE id = old.session_id;
END""",
    """
CREATE TRIGGER sessions_stats_ai AFTER INSERT ON sessions BEGIN
  INSERT INTO source_stats(source, sessions, messages) VALUES (new.source, 1, new.message_count)
  ON CONFLICT(source) DO UPDATE SET sessions = sessions + 1,
                                    messages = messages + excluded.messages;
END""",
    """
CREATE TRIGGER sessions_stats_ad AFTER DELETE ON sessions BEGIN
  UPDATE source_stats SET sessions = sessions - 1, messages = messages - old.message_count
  WHERE source = old.source;
END""",
    """
CREATE TRIGGER sessions_stats_au AFTER UPDATE OF message_count ON sessions
WHEN old.source = new.source AND old.message_count != new.message_count BEGIN
  UPDATE source_stats SET messages = messages + new.message_count - old.message_count
  WHERE source = new.source;
END""",
    """
CREATE TRIGGER sessions_stats_source_au AFTER UPDATE OF source ON sessions
WHEN old.source != new.source BEGIN
  UPDATE source_stats SET messages = messages - old.message_count, sessions = sessions - 1
  WHERE source = old.source;
  INSERT INTO source_stats(source, sessions, messages) VALUES (new.source, 1, new.message_count)
  ON CONFLICT(source) DO UPDATE SET sessions = sessions + 1,
                                    messages = messages + excluded.messages;
END""",
]


def fts_merge_step(conn: Any, pages: int = 200) -> None:
    """One bounded step of FTS5 segment merging, for maintenance (never inside an append)."""
    conn.exec_driver_sql(
        "INSERT INTO messages_fts(messages_fts, rank) VALUES ('merge', ?)", (pages,)
    )
