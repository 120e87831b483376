"""Everything SQLite-only: connection PRAGMAs, BEGIN IMMEDIATE, file modes, FTS5 and counter DDL."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import Connection, Engine, event, text

from shared.db.errors import StoreError

SQLITE_HEADER = b"SQLite format 3\x00"
BUSY_TIMEOUT_MS = 10_000
# Tool output can be megabytes; the full text stays in `messages`, the index sees this much.
FTS_TOOL_OUTPUT_CAP = 4000
# Execution option read by the `begin` hook: writers take the write lock up front.
BEGIN_OPTION = "hermes_begin"
# Applies to a new file only (fixed once the first page is written). 8 or 16 KiB pages save
# 2-3% of the file (fewer half-empty overflow pages) but double or quadruple the WAL bytes of
# every append (measured with the bench/store.py corpus); 4 KiB wins.
PAGE_SIZE = 4096
# The commit that takes the WAL past this size copies it into the database (a checkpoint)
# before returning. SQLite's default, 1000 pages (4 MiB), puts a 10-20 ms checkpoint into
# about one append in a hundred, i.e. into the p99; at 16 MiB it lands in about one append in
# 400 and costs 30-60 ms (bench/store.py). A maintenance task may checkpoint more often with
# `wal_checkpoint` (PASSIVE: it never waits for, or blocks, writers), taking even that out of
# the turn path; this threshold is what bounds the WAL when nothing else runs.
WAL_AUTOCHECKPOINT_BYTES = 16 * 1024 * 1024
# A WAL that grew past this (a long reader held checkpoints back, a bulk import) is cut back to
# it when it restarts, so the -wal file does not keep its high-water size on disk.
JOURNAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024


def prepare_file(path: Path) -> None:
    """Create HERMES_HOME and an empty 0600 state.db if missing; refuse a non-SQLite file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise StoreError(f"cannot create {path.parent}: {exc.strerror or exc}") from None
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise StoreError(f"{path.parent} is not writable; state.db needs a writable HERMES_HOME")
    if path.exists():
        _check_header(path)
    else:
        _create(path)
    secure_files(path)


def _create(path: Path) -> None:
    """A new state.db appears whole: made beside it (page size, incremental auto-vacuum, WAL:
    one 4 KiB page) and linked into place, so a 0-byte state.db is always damage, never a
    file another process is creating (`sqlite_health.check_file` refuses those)."""
    temp = path.with_name(f".{path.name}.new-{os.getpid()}")
    try:
        temp.unlink(missing_ok=True)
        os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        conn = sqlite3.connect(temp)
        try:
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            conn.execute("PRAGMA journal_mode = WAL")
        finally:
            conn.close()
        try:
            os.link(temp, path)
        except FileExistsError:
            _check_header(path)  # another process made it first
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"cannot create {path}: {getattr(exc, 'strerror', None) or exc}") from None
    finally:
        for leftover in (temp, Path(f"{temp}-wal"), Path(f"{temp}-shm")):
            leftover.unlink(missing_ok=True)


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
            cursor.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # before WAL writes page 1
            if cursor.execute("PRAGMA page_count").fetchone()[0] == 0:
                # A new file keeps a free-page map so space comes back in small steps
                # (`reclaim_step`) instead of one VACUUM that holds the write lock for seconds.
                cursor.execute("PRAGMA auto_vacuum = INCREMENTAL")
            mode = cursor.execute("PRAGMA journal_mode").fetchone()[0]
            if mode != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
            page_size = cursor.execute("PRAGMA page_size").fetchone()[0]
            pages = max(1, WAL_AUTOCHECKPOINT_BYTES // page_size)
            cursor.execute(f"PRAGMA wal_autocheckpoint = {pages}")
            cursor.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT_BYTES}")
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.execute("PRAGMA temp_store = MEMORY")
            cursor.execute("PRAGMA cache_size = -16000")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get(BEGIN_OPTION, "DEFERRED")
        # Straight to the driver: this runs for every transaction, and a Core execution costs
        # several times the statement itself.
        conn.connection.driver_connection.execute(f"BEGIN {mode}")


SQLITE_CORRUPT = 11
SQLITE_NOTADB = 26


def is_not_a_database(exc: BaseException) -> bool:
    """SQLITE_CORRUPT or SQLITE_NOTADB (by result code: "malformed JSON" is not corruption)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (SQLITE_CORRUPT, SQLITE_NOTADB)
    text = str(exc).lower()
    return "file is not a database" in text or "database disk image is malformed" in text


# --- DDL used by migrations (kept here so callers never see SQLite-only SQL) ---

# Rows with NULL content (tool-call-only turns) are never indexed by the triggers, so the view
# must not offer them either: FTS5's 'integrity-check' compares the index with this view.
FTS_SOURCE_VIEW = f"""
CREATE VIEW messages_fts_source AS
SELECT id,
       CASE WHEN role = 'tool' THEN substr(content, 1, {FTS_TOOL_OUTPUT_CAP}) ELSE content END
         AS content
FROM messages
WHERE content IS NOT NULL
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

# FTS5 merges segments as part of ordinary inserts. With automerge on, every 64 leaf pages
# written (about 64 appends) do at most 64 x levels pages of merge work, and a big merge
# proceeds in such steps across many appends: bounded (the largest steps take 20-45 ms at 1M
# messages; bench/store.py) and it keeps the index near 15-70 segments. Queries read every
# one (at 200k messages, 66 segments against 1: rare words 2.4 vs 1.5 ms p50, phrases 5.9 vs
# 1.7), so maintenance merges further (`fts_merge_step`, the index sweep).
# Automerge off is worse without a maintenance runner: segments then
# pile up until 'crisismerge' merges a whole level inside one append, each level 64 times
# bigger than the last (seconds at 1M). With automerge at 4 a crisis merge never comes.
FTS_AUTOMERGE = 4
FTS_TUNING = [
    f"INSERT INTO messages_fts(messages_fts, rank) VALUES ('automerge', {FTS_AUTOMERGE})",
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


def wal_checkpoint(dbapi_conn: sqlite3.Connection, mode: str = "PASSIVE") -> tuple[int, int, int]:
    """Copy the WAL into the database file: (busy, WAL frames, frames checkpointed).

    PASSIVE copies what no reader still needs and waits for nobody, so a maintenance task can
    run it at any time without stalling turn writes. Run it outside a transaction.
    """
    if mode not in ("PASSIVE", "FULL", "RESTART", "TRUNCATE"):
        raise ValueError(f"unknown checkpoint mode {mode!r}")
    row = dbapi_conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
    return int(row[0]), int(row[1]), int(row[2])


# The FTS5 indexes of state.db: words (`messages_fts`, revision 0001) and substrings
# (`messages_cjk`, revision 0003; see shared.search.sqlite.ddl).
FTS_INDEXES = ("messages_fts", "messages_cjk")
# An FTS5 index keeps its list of segments in one record of its `_data` table (rowid 10): a
# 4-byte cookie, in the V2 format a 4-byte marker, then varints: levels, segments, ...
# (fts5_index.c, "Structure record"; the file format is stable).
_STRUCTURE_ROWID = 10
_STRUCTURE_V2 = b"\xff\x00\x00\x01"


def _index_name(table: str) -> str:
    if table not in FTS_INDEXES:
        raise ValueError(f"unknown FTS5 index {table!r}")
    return table


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """SQLite's varint at `at`: (value, next offset). Big-endian 7-bit groups; a 9th byte
    gives all its 8 bits."""
    value = 0
    for _ in range(8):
        byte = data[at]
        at += 1
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at
    return (value << 8) | data[at], at + 1


def fts_segments(conn: Any, table: str = "messages_fts") -> int:
    """How many segments (b-trees) the FTS5 index `table` holds: 1 when fully merged, 0 when
    empty. A query reads every segment, and deleted rows stay in old segments until a merge
    rewrites them, so this is what maintenance watches."""
    row = conn.exec_driver_sql(
        f"SELECT block FROM {_index_name(table)}_data WHERE id = ?", (_STRUCTURE_ROWID,)
    ).first()
    if row is None:
        return 0
    record = bytes(row[0])
    at = 8 if record[4:8] == _STRUCTURE_V2 else 4
    _levels, at = _varint(record, at)
    segments, _at = _varint(record, at)
    return segments


# A 'merge' with a positive budget only takes levels holding at least `usermerge` segments
# (FTS5's default 4, the same as automerge: it would find little that appends left). At 2
# every level with two segments is merged: traffic's small segments fold together (at 200k
# messages, 72 segments became 4 for 0.02 s of work) without rewriting the big one.
USERMERGE = 2


def fts_hold_automerge(conn: Any, table: str, held: bool) -> None:
    """Stop (`held`) or restart the merging that appends do, around a maintenance merge.

    Appends merge as they write: every 64 leaf pages written, one of them does up to 64 x
    levels pages of merging, and FTS5 carries on an unfinished merge first. With a big
    segment in a maintenance merge under way, that append held the write lock 100-250 ms at
    a million messages. Held, appends only merge once 64 segments pile up on the lowest
    level (crisismerge; one-page segments, cheap); the maintenance steps fold the small
    levels as they go, since FTS5 merges a lower level holding more segments than the merge
    under way has inputs before that merge. Sets `usermerge` too. A run that dies holding it
    leaves automerge at 0; the next maintenance merge ends by setting it back (the index
    sweep runs one as soon as the segments that appends then leave pass its threshold).
    """
    name = _index_name(table)
    settings = {"automerge": 0 if held else FTS_AUTOMERGE, "usermerge": USERMERGE}
    current = dict(conn.exec_driver_sql(f"SELECT k, v FROM {name}_config").all())
    for key, value in settings.items():
        if current.get(key) != value:
            conn.exec_driver_sql(f"INSERT INTO {name}({name}, rank) VALUES (?, ?)", (key, value))


def fts_merge_step(
    conn: Any, pages: int = 200, table: str = "messages_fts", *, start: bool = False
) -> int:
    """One bounded step of FTS5 segment merging, for maintenance (never inside an append):
    about `pages` leaf pages written. `start` begins a merge of every segment into one (a
    negative budget: FTS5 puts them all on one level, and merging into the oldest segment
    drops the rows deleted since they were written); the steps after it carry that merge on.
    Returns the rows the step changed: fewer than `pages` means it ran out of work (a step
    that writes its whole budget changes several rows per page)."""
    name = _index_name(table)
    driver = conn.connection.driver_connection
    before = driver.total_changes
    budget = -abs(int(pages)) if start else abs(int(pages))
    conn.exec_driver_sql(f"INSERT INTO {name}({name}, rank) VALUES ('merge', ?)", (budget,))
    return int(driver.total_changes - before)


INCREMENTAL = 2


def auto_vacuum_mode(dbapi_conn: sqlite3.Connection) -> int:
    """0 none, 1 full, 2 incremental (files made by hermes-fleet are incremental)."""
    return int(dbapi_conn.execute("PRAGMA auto_vacuum").fetchone()[0])


def free_pages(dbapi_conn: sqlite3.Connection) -> int:
    return int(dbapi_conn.execute("PRAGMA freelist_count").fetchone()[0])


def reclaim_step(conn: Any, pages: int) -> tuple[int, int]:
    """Give up to `pages` free pages back to the file system inside the caller's (short) write
    transaction: (pages given back, pages still free). Only for incremental auto-vacuum files."""
    cursor = conn.connection.dbapi_connection.cursor()
    try:
        free = int(cursor.execute("PRAGMA freelist_count").fetchone()[0])
        # `incremental_vacuum(N)` frees one page per VM step, each step yielding a row with no
        # columns. Python's sqlite3 (3.11) steps a statement once in execute(), and a fetch
        # that finds a row of no columns resets the statement instead of stepping on: N asked,
        # one freed. So one statement per page: each frees exactly one page however the
        # driver steps it. (Not executescript: it would COMMIT the caller's transaction.)
        for _ in range(min(int(pages), free)):
            cursor.execute("PRAGMA incremental_vacuum(1)")
        left = int(cursor.execute("PRAGMA freelist_count").fetchone()[0])
        return free - left, left
    finally:
        cursor.close()


def file_bytes(path: Path) -> tuple[int, int]:
    """Bytes of state.db and of its -wal (0 for a file that is not there)."""
    sizes = []
    for candidate in (path, Path(f"{path}-wal")):
        try:
            sizes.append(candidate.stat().st_size)
        except OSError:
            sizes.append(0)
    return sizes[0], sizes[1]


def try_truncate_wal(dbapi_conn: sqlite3.Connection) -> bool:
    """Cut the -wal file back to zero bytes if nobody needs it right now; never waits.

    TRUNCATE waits (holding writers off) for readers of the WAL to finish; with the busy
    timeout at 0 it gives up at once instead, leaving the WAL for SQLite to reuse. Run it
    outside a transaction, after a PASSIVE checkpoint has copied the WAL in.
    """
    dbapi_conn.execute("PRAGMA busy_timeout = 0")
    try:
        busy, _frames, _copied = wal_checkpoint(dbapi_conn, "TRUNCATE")
    except sqlite3.OperationalError:  # SQLITE_BUSY: a writer holds the lock
        return False
    finally:
        dbapi_conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return busy == 0


def savepoint(dbapi_conn: Any, name: str) -> None:
    """Open savepoint `name` on a driver connection already inside a transaction."""
    dbapi_conn.execute(f"SAVEPOINT {name}")


def release_savepoint(dbapi_conn: Any, name: str) -> None:
    dbapi_conn.execute(f"RELEASE {name}")


def rollback_to_savepoint(dbapi_conn: Any, name: str) -> None:
    """Undo everything since savepoint `name`, and close it."""
    dbapi_conn.execute(f"ROLLBACK TO {name}")
    dbapi_conn.execute(f"RELEASE {name}")


def integrity_check(dbapi_conn: sqlite3.Connection) -> str:
    """'ok', or SQLite's first finding about a damaged file."""
    return str(dbapi_conn.execute("PRAGMA integrity_check").fetchone()[0])


def full_vacuum(engine: Engine) -> None:
    """Checkpoint the WAL into the file, VACUUM, truncate the WAL. VACUUM cannot run inside a
    transaction, so it goes through a driver connection in autocommit mode; its errors are
    the driver's own (sqlite3.Error)."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        try:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            cursor.execute("VACUUM")
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            cursor.close()
    finally:
        raw.close()


def peek_schema(path: Path) -> tuple[str | None, list[str]] | None:
    """(stamped revision, table names) of the SQLite file at `path`, read-only and changing
    nothing; None when it is empty, missing or unreadable (the usual checks report those)."""
    try:
        if path.stat().st_size == 0:
            return None
    except OSError:
        return None
    # With no -wal beside it the file holds everything: read it as immutable, so no -wal or
    # -shm is created (a refused file keeps nothing new beside it). With one, SQLite must see
    # what it holds (both exist then, or the open-time WAL check has looked at it).
    mode = "ro" if Path(f"{path}-wal").exists() else "ro&immutable=1"
    try:
        conn = sqlite3.connect(f"file:{quote(str(path))}?mode={mode}", uri=True, timeout=10)
    except sqlite3.Error:
        return None
    try:
        names = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%'"
            " ESCAPE '\\'"
        ).fetchall()
        tables = [str(row[0]) for row in names]
        rev: str | None = None
        if "alembic_version" in tables:
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
            rev = str(row[0]) if row and row[0] is not None else None
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return rev, tables


def autoincrement_high_water(conn: Connection, table: str) -> int:
    """The largest id an AUTOINCREMENT table ever handed out (0: none, or not AUTOINCREMENT)."""
    found = conn.execute(
        text("SELECT seq FROM sqlite_sequence WHERE name = :t"), {"t": table}
    ).scalar()
    return int(found or 0)


def set_autoincrement_high_water(conn: Connection, table: str, value: int) -> None:
    """Ids of an AUTOINCREMENT table continue after `value` (never below what it holds)."""
    done = conn.execute(
        text("UPDATE sqlite_sequence SET seq = max(seq, :v) WHERE name = :t"),
        {"t": table, "v": value},
    )
    if done.rowcount == 0:
        conn.execute(
            text("INSERT INTO sqlite_sequence(name, seq) VALUES (:t, :v)"), {"t": table, "v": value}
        )
