"""state.db on disk: created at head, upgraded, refused when foreign/newer/broken; PRAGMAs; FTS5."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import exc, text

from shared.db import Store, StoreError, open_store
from shared.db.engine import connect
from shared.db.migrate import HEAD, alembic_config, current_revision
from shared.db.sqlite import FTS_TOOL_OUTPUT_CAP
from shared.store import lineage, session_listing
from shared.store import messages as message_rows
from shared.store import sessions as session_rows
from tests.integration.storekit import (
    fill,
    fts_ids,
    fts_integrity_check,
    make_db_at,
    raw,
    sqlite_url,
)

FOUNDATION_TABLES = {"sessions", "messages", "messages_fts", "state_meta", "source_stats"}
PIPELINE_TABLES = {"routes", "inbox", "outbox", "leases"}


def db_path(home: Path) -> Path:
    return home / "state.db"


def table_names(path: Path) -> set[str]:
    with raw(path) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {row[0] for row in rows}


def stamped(path: Path) -> str | None:
    with raw(path) as conn:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    return None if row is None else str(row[0])


def snapshot(path: Path) -> tuple[bytes, int, list[str]]:
    """Everything a refusal must leave alone: content, mode, and which side files exist."""
    siblings = sorted(p.name for p in path.parent.iterdir())
    return path.read_bytes(), path.stat().st_mode, siblings


# --- the revision chain ---


def test_head_constant_is_alembics_head() -> None:
    scripts = ScriptDirectory.from_config(alembic_config())
    assert scripts.get_current_head() == HEAD
    assert scripts.get_heads() == [HEAD]


def test_revision_chain_is_linear() -> None:
    scripts = ScriptDirectory.from_config(alembic_config())
    revisions = list(scripts.walk_revisions())
    bases = [rev for rev in revisions if rev.down_revision is None]
    assert len(bases) == 1, "exactly one base revision"
    for rev in revisions:
        assert rev.down_revision is None or isinstance(rev.down_revision, str), (
            f"{rev.revision} is a merge point"
        )
        assert len(rev.nextrev) <= 1, f"{rev.revision} branches into {sorted(rev.nextrev)}"
    # Walking down from head visits every revision once, ending at the base.
    walked = [rev.revision for rev in revisions]
    assert walked[0] == HEAD
    assert walked[-1] == bases[0].revision
    assert len(set(walked)) == len(walked)


# --- a new file ---


def test_new_file_is_created_at_head_with_every_table(store: Store, hermes_home: Path) -> None:
    path = db_path(hermes_home)
    assert store.path == path
    assert stamped(path) == HEAD
    assert table_names(path) >= FOUNDATION_TABLES | PIPELINE_TABLES
    with store.read() as conn:
        assert current_revision(conn)[0] == HEAD


def test_new_file_is_owner_only(store: Store, hermes_home: Path) -> None:
    assert db_path(hermes_home).stat().st_mode & 0o777 == 0o600


def test_missing_home_is_created(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "state.db"
    opened = open_store(sqlite_url(path))
    opened.close()
    assert stamped(path) == HEAD


def test_an_empty_file_is_refused_not_made_a_new_store(hermes_home: Path) -> None:
    """A new store is made whole beside state.db and linked in, so a 0-byte state.db is an
    emptied file (issue 21): refused, untouched, with nothing created beside it."""
    path = db_path(hermes_home)
    path.touch()
    with pytest.raises(StoreError, match=r"0 bytes.*move it away"):
        open_store(sqlite_url(path))
    assert path.stat().st_size == 0
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_a_new_store_is_never_seen_empty(hermes_home: Path) -> None:
    path = db_path(hermes_home)
    opened = open_store(sqlite_url(path))
    opened.close()
    assert stamped(path) == HEAD
    assert not [p for p in path.parent.iterdir() if ".new-" in p.name]


def test_reopening_keeps_data_and_revision(store: Store, hermes_home: Path) -> None:
    fill(store)
    store.close()
    again = open_store(sqlite_url(db_path(hermes_home)))
    try:
        with again.read() as conn:
            assert len(session_listing.list_sessions(conn)[0]) == 3
            assert len(message_rows.transcript(conn, "s001")) == 4
    finally:
        again.close()
    assert stamped(db_path(hermes_home)) == HEAD


# --- connection settings ---


@pytest.mark.parametrize("kind", ["read", "write"])
def test_every_connection_has_the_pragmas(store: Store, kind: str) -> None:
    unit = store.read() if kind == "read" else store.write()
    with unit as conn:

        def pragma(name: str) -> object:
            return conn.execute(text(f"PRAGMA {name}")).scalar()

        assert pragma("journal_mode") == "wal"
        assert pragma("synchronous") == 1  # NORMAL
        assert pragma("foreign_keys") == 1
        busy = pragma("busy_timeout")
        assert isinstance(busy, int)
        assert busy > 0


def test_foreign_keys_are_enforced(store: Store) -> None:
    with pytest.raises(exc.IntegrityError), store.write() as conn:
        conn.execute(
            text(
                "INSERT INTO messages(session_id, role, content, timestamp)"
                " VALUES ('no-such-session', 'user', 'hi', 1)"
            )
        )


# --- indexes ---


def plan(store: Store, sql: str, **params: object) -> str:
    with store.read() as conn:
        rows = conn.execute(text("EXPLAIN QUERY PLAN " + sql), params).all()
    return " | ".join(str(row[-1]) for row in rows)


def test_listing_by_activity_uses_an_index(store: Store) -> None:
    found = plan(store, "SELECT id FROM sessions ORDER BY last_active_at DESC LIMIT 20")
    assert "INDEX" in found
    assert "TEMP B-TREE" not in found


def test_listing_by_source_uses_an_index(store: Store) -> None:
    found = plan(
        store,
        "SELECT id FROM sessions WHERE source = :s ORDER BY last_active_at DESC LIMIT 20",
        s="telegram",
    )
    assert "INDEX" in found
    assert "(source=?)" in found
    assert "TEMP B-TREE" not in found


def test_finding_children_by_parent_uses_an_index(store: Store) -> None:
    found = plan(store, "SELECT id FROM sessions WHERE parent_session_id = :p", p="x")
    assert "INDEX" in found
    assert "(parent_session_id=?)" in found


def test_transcript_uses_an_index(store: Store) -> None:
    found = plan(store, "SELECT * FROM messages WHERE session_id = :s ORDER BY id", s="x")
    assert "(session_id=?)" in found
    assert "TEMP B-TREE" not in found


def test_title_index_is_partial_and_unique(store: Store, hermes_home: Path) -> None:
    with raw(db_path(hermes_home)) as conn:
        rows = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'sessions'"
        ).fetchall()
    title_indexes = [row[0] for row in rows if row[0] and "(title)" in row[0]]
    assert len(title_indexes) == 1
    ddl = " ".join(title_indexes[0].upper().split())
    assert ddl.startswith("CREATE UNIQUE INDEX")
    assert "WHERE TITLE IS NOT NULL" in ddl


def test_many_untitled_sessions_but_no_duplicate_title(store: Store) -> None:
    insert = text(
        "INSERT INTO sessions(id, source, title, started_at, last_active_at)"
        " VALUES (:id, 'cli', :title, 1, 1)"
    )
    with store.write() as conn:
        for i in range(3):
            conn.execute(insert, {"id": f"untitled{i}", "title": None})
        conn.execute(insert, {"id": "one", "title": "same"})
    with pytest.raises(exc.IntegrityError), store.write() as conn:
        conn.execute(insert, {"id": "two", "title": "same"})


# --- older files are upgraded, never recreated ---


def test_older_file_is_upgraded_on_open_with_its_data(hermes_home: Path) -> None:
    path = db_path(hermes_home)
    make_db_at(path, "0001")
    assert stamped(path) == "0001"
    assert not PIPELINE_TABLES & table_names(path)
    writer = connect(sqlite_url(path))  # as an older hermes would write to it
    try:
        with writer.write() as conn:
            session_rows.create_session(
                conn, session_id="20200101_000000_abcdef", source="cli", now=5.0, title="Old work"
            )
            message_rows.append_message(
                conn, "20200101_000000_abcdef", "user", "ancient tapestry", now=5.0
            )
    finally:
        writer.close()

    upgraded = open_store(sqlite_url(path))
    try:
        with upgraded.read() as conn:
            record = lineage.resolve(conn, "Old work")
            assert record.id == "20200101_000000_abcdef"
            assert record.message_count == 1
            [message] = message_rows.transcript(conn, record.id)
            assert message.content == "ancient tapestry"
            assert fts_ids(conn, "tapestry") == {message.id}
            assert session_listing.stats(conn).messages == 1
    finally:
        upgraded.close()
    assert stamped(path) == HEAD
    assert table_names(path) >= PIPELINE_TABLES


def test_upgrade_repairs_the_fts_view_of_older_files(hermes_home: Path) -> None:
    """Before 0004 the FTS content view offered NULL-content rows the index never held."""
    path = db_path(hermes_home)
    make_db_at(path, "0003")
    with raw(path) as conn:
        conn.execute("DROP VIEW messages_fts_source")
        conn.execute(
            "CREATE VIEW messages_fts_source AS SELECT id, CASE WHEN role = 'tool'"
            f" THEN substr(content, 1, {FTS_TOOL_OUTPUT_CAP}) ELSE content END AS content"
            " FROM messages"
        )
    writer = connect(sqlite_url(path))
    try:
        with writer.write() as conn:
            session_rows.create_session(conn, session_id="s", source="cli", now=1.0)
            message_rows.append_message(conn, "s", "user", "run the tool", now=1.0)
            message_rows.append_message(conn, "s", "assistant", None, now=2.0, tool_calls=[{}])
        with pytest.raises(StoreError, match="corrupt"), writer.read() as conn:
            fts_integrity_check(conn)
    finally:
        writer.close()
    upgraded = open_store(sqlite_url(path))
    try:
        with upgraded.read() as conn:
            fts_integrity_check(conn)
            assert len(fts_ids(conn, "tool")) == 1
    finally:
        upgraded.close()


def test_older_file_is_refused_when_upgrades_are_off(hermes_home: Path) -> None:
    path = db_path(hermes_home)
    make_db_at(path, "0001")
    with pytest.raises(StoreError, match="hermes db upgrade"):
        open_store(sqlite_url(path), upgrade=False)
    assert stamped(path) == "0001"


# --- files that are not ours, too new, not SQLite ---


def test_foreign_database_is_refused_and_left_untouched(hermes_home: Path) -> None:
    path = db_path(hermes_home)
    with raw(path) as conn:
        conn.execute("CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users(name) VALUES ('alice')")
    path.chmod(0o644)
    before = snapshot(path)
    with pytest.raises(StoreError) as caught:
        open_store(sqlite_url(path))
    message = str(caught.value)
    assert "\n" not in message
    assert "users" in message
    assert str(path) in message
    assert snapshot(path) == before  # same bytes (still a rollback-journal file), same mode
    with raw(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert conn.execute("SELECT name FROM users").fetchall() == [("alice",)]


def test_newer_schema_is_refused_and_left_untouched(hermes_home: Path) -> None:
    path = db_path(hermes_home)
    open_store(sqlite_url(path)).close()
    with raw(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    before = snapshot(path)
    with pytest.raises(StoreError, match="newer") as caught:
        open_store(sqlite_url(path))
    assert "9999" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert snapshot(path)[:2] == before[:2]
    assert stamped(path) == "9999"


@pytest.mark.parametrize(
    "content",
    [
        b"hello, this is a text file and certainly not a database\n" * 20,
        b"PK\x03\x04 a zip file",
        b"x",
        b"SQLite format 2\x00" + b"\x00" * 200,
    ],
    ids=["text", "zip", "one-byte", "almost-header"],
)
def test_non_sqlite_file_is_refused_with_one_line(hermes_home: Path, content: bytes) -> None:
    path = db_path(hermes_home)
    path.write_bytes(content)
    with pytest.raises(StoreError) as caught:
        open_store(sqlite_url(path))
    message = str(caught.value)
    assert "\n" not in message
    assert "not a SQLite database" in message
    assert path.read_bytes() == content


def test_state_db_that_is_a_directory_is_refused(hermes_home: Path) -> None:
    db_path(hermes_home).mkdir()
    with pytest.raises(StoreError) as caught:
        open_store(sqlite_url(db_path(hermes_home)))
    assert "\n" not in str(caught.value)


# --- corrupt files ---


def _filled_db(home: Path) -> Path:
    path = db_path(home)
    opened = open_store(sqlite_url(path))
    try:
        with opened.write() as conn:
            for i in range(40):
                sid = f"20240101_0000{i:02d}_abcdef"
                session_rows.create_session(conn, session_id=sid, source="cli", now=float(i))
                for j in range(10):
                    message_rows.append_message(conn, sid, "user", f"word{j} " * 80, now=float(i))
    finally:
        opened.close()  # checkpoints the WAL into the main file
    assert not Path(f"{path}-wal").exists()
    return path


def _read_everything(url: str) -> None:
    opened = open_store(url)
    try:
        with opened.read() as conn:
            for listing in session_listing.list_sessions(conn, limit=1000)[0]:
                message_rows.transcript(conn, listing.record.id)
            fts_ids(conn, "word3")
    finally:
        opened.close()


def _overwrite_page(path: Path, page: int, data: bytes) -> None:
    with raw(path) as conn:
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    with path.open("r+b") as handle:
        handle.seek((page - 1) * page_size)
        handle.write(data[:page_size].ljust(page_size, b"\xa5"))


def test_garbage_in_a_table_page_is_a_store_error_not_a_traceback(hermes_home: Path) -> None:
    path = _filled_db(hermes_home)
    with raw(path) as conn:
        root = int(
            conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'messages'").fetchone()[0]
        )
    _overwrite_page(path, root, random.Random(7).randbytes(65536))
    assert path.read_bytes()[:16] == b"SQLite format 3\x00"

    opened = open_store(sqlite_url(path))  # the schema pages are intact: open works
    try:
        with pytest.raises(StoreError, match="corrupt") as caught, opened.read() as conn:
            message_rows.transcript(conn, "20240101_000003_abcdef")
        assert "\n" not in str(caught.value)
        with pytest.raises(StoreError, match=r"damaged.*writes refused"), opened.write() as conn:
            message_rows.append_message(conn, "20240101_000003_abcdef", "user", "hi", now=1.0)
    finally:
        opened.close()


@pytest.mark.parametrize("how", ["truncated", "garbage-after-header", "garbage-in-version-table"])
def test_corrupt_file_is_a_store_error(hermes_home: Path, how: str) -> None:
    path = _filled_db(hermes_home)
    size = path.stat().st_size
    if how == "truncated":
        with path.open("r+b") as handle:
            handle.truncate(size // 3)
    elif how == "garbage-after-header":
        with path.open("r+b") as handle:
            handle.seek(100)
            handle.write(random.Random(1).randbytes(size - 100))
    else:
        # the version table's page: read on every open (page 2 is the free-page map that
        # incremental auto-vacuum keeps, which an open never reads)
        with raw(path) as conn:
            root = conn.execute(
                "SELECT rootpage FROM sqlite_master WHERE name = 'alembic_version'"
            ).fetchone()[0]
        _overwrite_page(path, int(root), random.Random(2).randbytes(65536))
    with pytest.raises(StoreError) as caught:
        _read_everything(sqlite_url(path))
    message = str(caught.value)
    assert "\n" not in message
    assert str(path) in message


# --- a home that cannot hold state.db ---


def test_home_under_a_regular_file_is_one_clear_line(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(StoreError) as caught:
        open_store(sqlite_url(blocker / "hermes" / "state.db"))
    message = str(caught.value)
    assert "\n" not in message
    assert "not-a-dir" in message


def test_read_only_home_is_one_clear_line(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("running as root: chmod 0500 does not stop root from writing")
    home = tmp_path / "hermes"
    home.mkdir()
    home.chmod(0o500)
    try:
        with pytest.raises(StoreError) as caught:
            open_store(sqlite_url(home / "state.db"))
    finally:
        home.chmod(0o700)
    message = str(caught.value)
    assert "\n" not in message
    assert str(home) in message
