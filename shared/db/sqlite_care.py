"""`hermes db check` and `hermes db backup` on SQLite: a full look at the file, and copies of it.

The check reads everything: `integrity_check` (every page, index and constraint), FTS5's own
'integrity-check' of each search index against its messages, and the counters triggers keep
(sessions' message counts, the per-source totals). The backup is SQLite's online backup API,
so writers go on while it copies; the copy is checked before it counts.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared.db.errors import StoreError
from shared.db.sqlite import FTS_INDEXES
from shared.db.sqlite_health import BACKUPS_DIR, quick_check

if TYPE_CHECKING:
    from shared.db.engine import Store

FINDINGS_SHOWN = 20
BACKUP_PREFIX = "state-"
BACKUP_SUFFIX = ".db"


def findings(conn: sqlite3.Connection, *, counters: bool = True) -> list[str]:
    """Everything wrong with the database behind `conn` (a driver connection), [] when healthy;
    `counters=False` leaves out the message counters (a copy checks those against its source)."""
    found: list[str] = []
    try:
        rows = conn.execute(f"PRAGMA integrity_check({FINDINGS_SHOWN})").fetchall()
    except sqlite3.DatabaseError as exc:
        return [f"integrity: {exc}"]
    found += [f"integrity: {row[0]}" for row in rows if row[0] != "ok"]
    tables = {
        str(row[0])
        for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    }
    for index in FTS_INDEXES:
        if index in tables:
            found += _fts_findings(conn, index)
    if counters and {"sessions", "messages"} <= tables:
        found += _counter_findings(conn, "source_stats" in tables)
    return found


def _fts_findings(conn: sqlite3.Connection, index: str) -> list[str]:
    # 'integrity-check' is spelt as an INSERT: inside a transaction rolled back, it changes
    # nothing. A read-only file cannot begin one: that is said, not taken for damage.
    try:
        conn.execute("BEGIN")
        conn.execute(f"INSERT INTO {index}({index}, rank) VALUES ('integrity-check', 1)")
    except sqlite3.OperationalError as exc:
        if "readonly" in str(exc):
            return []
        return [f"search index {index}: {exc}"]
    except sqlite3.DatabaseError as exc:
        return [f"search index {index}: {exc}"]
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    return []


def _counter_findings(conn: sqlite3.Connection, with_sources: bool) -> list[str]:
    found: list[str] = []
    wrong = conn.execute(
        "SELECT s.id, s.message_count, count(m.id) FROM sessions s"
        " LEFT JOIN messages m ON m.session_id = s.id"
        " GROUP BY s.id HAVING s.message_count != count(m.id) LIMIT ?",
        (FINDINGS_SHOWN,),
    ).fetchall()
    found += [
        f"session {sid}: message_count {kept} but {real} messages" for sid, kept, real in wrong
    ]
    if with_sources:
        wrong = conn.execute(
            "SELECT t.source, coalesce(st.sessions, 0), coalesce(st.messages, 0),"
            " t.sessions, t.messages FROM"
            " (SELECT source, count(*) AS sessions, sum(message_count) AS messages"
            "  FROM sessions GROUP BY source) t"
            " LEFT JOIN source_stats st ON st.source = t.source"
            " WHERE coalesce(st.sessions, 0) != t.sessions"
            "    OR coalesce(st.messages, 0) != t.messages LIMIT ?",
            (FINDINGS_SHOWN,),
        ).fetchall()
        found += [
            f"source {src}: totals {ks} sessions/{km} messages but {rs}/{rm} counted"
            for src, ks, km, rs, rm in wrong
        ]
    return found


@dataclass(frozen=True, slots=True)
class Backup:
    path: Path
    bytes: int
    seconds: float
    removed: tuple[Path, ...]


def backups_dir(db_path: Path) -> Path:
    return db_path.parent / BACKUPS_DIR


def default_target(db_path: Path, now: float) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    return backups_dir(db_path) / f"{BACKUP_PREFIX}{stamp}{BACKUP_SUFFIX}"


def backup(
    source: sqlite3.Connection, db_path: Path, target: Path, *, keep: int | None = None
) -> Backup:
    """Copy the database behind `source` to `target` (a new 0600 file) with the online backup
    API, check the copy, and keep only the newest `keep` backups in its folder."""
    started = time.perf_counter()
    try:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise StoreError(f"{target} already exists; give another name") from None
    except OSError as exc:
        raise StoreError(f"cannot write {target}: {exc.strerror or exc}") from None
    os.close(fd)
    ok = False
    try:
        copy = sqlite3.connect(target)
        try:
            source.backup(copy, pages=1024)
            # One file, no -wal beside it: a copy stands on its own.
            copy.execute("PRAGMA journal_mode = DELETE")
            verdict = str(copy.execute("PRAGMA quick_check").fetchone()[0])
        finally:
            copy.close()
        if verdict != "ok":
            raise StoreError(f"the copy at {target} failed its check ({verdict}); removed")
        ok = True
    except sqlite3.Error as exc:
        raise StoreError(f"backup to {target} failed: {exc}") from None
    finally:
        if not ok:
            target.unlink(missing_ok=True)
    removed = prune_backups(target.parent, keep) if keep else ()
    return Backup(target, target.stat().st_size, time.perf_counter() - started, removed)


def prune_backups(folder: Path, keep: int) -> tuple[Path, ...]:
    """Remove all but the newest `keep` state-*.db backups in `folder` (names sort by time)."""
    found = sorted(folder.glob(f"{BACKUP_PREFIX}*{BACKUP_SUFFIX}"))
    removed = tuple(found[: max(0, len(found) - keep)])
    for old in removed:
        old.unlink(missing_ok=True)
    return removed


def check_store(store: Store, *, counters: bool = True) -> list[str]:
    """`findings` on a SQLite store's own connection (the open-time checks already passed)."""
    raw = store.engine.raw_connection()
    try:
        return findings(_driver(raw), counters=counters)
    finally:
        raw.close()


def backup_store(store: Store, target: Path, *, keep: int | None = None) -> Backup:
    if store.path is None:
        raise StoreError("backups are of SQLite files; on PostgreSQL use pg_dump")
    raw = store.engine.raw_connection()
    try:
        return backup(_driver(raw), store.path, target, keep=keep)
    finally:
        raw.close()


def quick_verdict(store: Store) -> str | None:
    """quick_check of a SQLite store when its file is small enough (None: skipped or not SQLite)."""
    if store.path is None:
        return None
    raw = store.engine.raw_connection()
    try:
        verdict = quick_check(_driver(raw), store.path)
    finally:
        raw.close()
    return None if verdict is None else " ".join(verdict.split())[:160]


def _driver(raw: Any) -> sqlite3.Connection:
    conn = raw.driver_connection
    if not isinstance(conn, sqlite3.Connection):
        raise StoreError("this needs a SQLite store")
    return conn


def newest_backup_age(folder: Path, now: float) -> float | None:
    """Seconds since the newest state-*.db backup in `folder` was written; None if none."""
    times = []
    for found in folder.glob(f"{BACKUP_PREFIX}*{BACKUP_SUFFIX}"):
        try:
            times.append(found.stat().st_mtime)
        except OSError:
            continue
    return now - max(times) if times else None
