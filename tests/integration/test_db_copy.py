"""`hermes db copy --to URL` through the real script: SQLite -> PostgreSQL -> SQLite, refusals,
and a copy killed mid-way (it commits nothing: the target stays empty and a rerun starts over).
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from shared.db import Store, open_store
from shared.db.copy import tables_to_copy
from shared.pipeline import cron
from shared.search import SearchRequest, search
from shared.store import media, memory, session_listing
from shared.store import messages as message_rows
from shared.store import sessions as session_rows
from tests.conftest import POSTGRES_DB, service_or_skip
from tests.integration.test_db_cli import assert_one_line_failure, hermes

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
TEXTS = [
    "the quarterly report is due friday",
    "我喜欢中文和日本語のテキスト",
    "emoji 🎉 and café naïve Ωμέγα",
    "ديناصور عربي",
    "tool output " + "x" * 5000,
]


def _admin(sql: str, *args: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(ADMIN, autocommit=True) as db:
        cur = db.execute(sql, args or None)
        return cur.fetchall() if cur.description else []


@pytest.fixture
def pg_target() -> Iterator[str]:
    """A new empty PostgreSQL database of this test (test_<checkout db>_<hex>), dropped after."""
    service_or_skip("PostgreSQL", "127.0.0.1", 5432)
    name = f"{POSTGRES_DB}_{uuid.uuid4().hex[:10]}"
    _admin(f'CREATE DATABASE "{name}"')
    yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fill(store: Store, sessions: int = 40, per_session: int = 12) -> None:
    """Sessions of every shape, their messages (unicode, CJK, NULL-content tool calls), memory,
    a cron job."""
    with store.write() as conn:
        for i in range(sessions):
            sid = f"20250101_{i:06d}_abcdef"
            session_rows.create_session(
                conn,
                session_id=sid,
                source=("cli", "telegram", "slack")[i % 3],
                now=1.7e9 + i,
                title=f"Sujet {i} — 会話" if i % 4 else None,
            )
            for j in range(per_session):
                role = ("user", "assistant", "tool")[j % 3]
                content = None if j % 7 == 6 else f"{TEXTS[(i + j) % len(TEXTS)]} #{i}-{j}"
                message_rows.append_message(
                    conn, sid, role, content, now=1.7e9 + i + j / 100, token_count=j
                )
            if i % 5 == 0:
                session_rows.end_session(conn, sid, "idle", now=1.7e9 + i + 1)
        # A continuation whose parent sorts after it: the copy may not insert in id order alone.
        session_rows.link_parent(
            conn, "20250101_000000_abcdef", f"20250101_{sessions - 1:06d}_abcdef"
        )
        memory.save_note(conn, "cli:local", "prefers metric units", now=1.7e9)
        # media: one blob per few sessions, one shared by two, more than one copy batch of them
        for i in range(min(sessions, 20)):
            data = bytes([i]) * (70_000 + i) + bytes(range(256))
            sid = f"20250101_{i:06d}_abcdef"
            media.put(conn, data, "image/png", max_bytes=1 << 20, session_id=sid, name=f"{i}.png")
            if i == 1:
                media.put(
                    conn,
                    data,
                    "image/png",
                    max_bytes=1 << 20,
                    session_id=f"20250101_{0:06d}_abcdef",
                )
        cron.add_job(conn, schedule="0 9 * * *", prompt="morning summary", now=1.7e9, name="am")


def dump(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every copied table's rows, sorted (text keys sort differently on each dialect)."""
    store = open_store(url)
    try:
        with store.read() as conn:
            return {
                t.name: sorted(map(tuple, conn.execute(select(t)).all()), key=repr)
                for t in tables_to_copy()
            }
    finally:
        store.close()


def stats_of(url: str) -> session_listing.StoreStats:
    """What `sessions stats` reads: SQLite's trigger-kept source_stats, PostgreSQL's sums."""
    store = open_store(url)
    try:
        with store.read() as conn:
            return session_listing.stats(conn)
    finally:
        store.close()


def copy(env: dict[str, str], source: str, target: str) -> subprocess.CompletedProcess[str]:
    return hermes({**env, "HERMES_DATABASE_URL": source}, "db", "copy", "--to", target)


def search_ids(url: str, query: str) -> set[str]:
    store = open_store(url)
    try:
        found = search(store, SearchRequest(query=query, limit=50))
    finally:
        store.close()
    assert "error" not in found, found
    return {hit["session_id"] for hit in found["results"]}


def test_round_trip_sqlite_postgresql_sqlite_is_equal(
    hermes_env: dict[str, str], store: Store, pg_target: str, tmp_path: Path
) -> None:
    fill(store)
    source = f"sqlite:///{store.path}"
    before, counted = dump(source), stats_of(source)
    assert len(before["messages"]) == 40 * 12 and len(counted.by_source) == 3
    assert len(before["media_blobs"]) == 20 and len(before["media_refs"]) == 21

    up = copy(hermes_env, source, pg_target)
    assert up.returncode == 0, up.stderr
    assert re.search(r"messages +480\n", up.stdout) and "rows/s" in up.stdout
    assert dump(pg_target) == before  # counters, titles, unicode, NULLs, floats: all as they were
    assert stats_of(pg_target) == counted

    back = tmp_path / "back" / "state.db"
    down = copy(hermes_env, pg_target, f"sqlite:///{back}")
    assert down.returncode == 0, down.stderr
    assert dump(f"sqlite:///{back}") == before
    # source_stats is derived: PostgreSQL keeps none, the SQLite copy's triggers rebuilt it
    assert stats_of(f"sqlite:///{back}") == counted
    assert back.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in back.parent.iterdir()] == ["state.db"]  # no partial file left

    # The derived indexes were rebuilt on the copy: words, CJK substrings, one character.
    for query in ("quarterly", "中文", "café", "ديناصور"):
        hits = search_ids(f"sqlite:///{back}", query)
        assert hits and hits == search_ids(source, query), query
    check = hermes({**hermes_env, "HERMES_DATABASE_URL": f"sqlite:///{back}"}, "db", "check")
    assert check.returncode == 0, check.stdout + check.stderr


def test_ids_continue_past_the_source_high_water_mark(
    hermes_env: dict[str, str], store: Store, pg_target: str
) -> None:
    fill(store, sessions=3, per_session=4)
    sid = "20250101_000002_abcdef"
    with store.write() as conn:
        newest = message_rows.append_message(conn, sid, "user", "to be deleted", now=2e9)
    with store.write() as conn:
        session_rows.delete_session(conn, sid)  # `newest` is gone: max(id) < high water
    assert copy(hermes_env, f"sqlite:///{store.path}", pg_target).returncode == 0
    target = open_store(pg_target)
    try:
        with target.write() as conn:
            added = message_rows.append_message(
                conn, "20250101_000001_abcdef", "user", "after the move", now=2e9
            )
            memo = memory.save_note(conn, "cli:local", "a new note", now=2e9)
        with target.read() as conn:
            record = session_rows.require_session(conn, "20250101_000001_abcdef")
    finally:
        target.close()
    assert added > newest and memo > 1
    assert record.last_active_at == 2e9


def test_a_non_empty_target_is_refused_and_left_alone(
    hermes_env: dict[str, str], store: Store, pg_target: str, tmp_path: Path
) -> None:
    fill(store, sessions=3, per_session=2)
    source = f"sqlite:///{store.path}"
    assert copy(hermes_env, source, pg_target).returncode == 0
    before = dump(pg_target)
    line = assert_one_line_failure(copy(hermes_env, source, pg_target), "not empty")
    assert "3 sessions" in line
    assert dump(pg_target) == before

    taken = tmp_path / "taken.db"
    taken.write_bytes(b"my notes")
    assert_one_line_failure(copy(hermes_env, source, f"sqlite:///{taken}"), "not empty")
    assert taken.read_bytes() == b"my notes"


@pytest.mark.parametrize(
    ("target", "needle"),
    [
        ("mysql://root@127.0.0.1/hermes", "cannot copy to 'mysql'"),
        ("not a url", "not a database URL"),
        ("postgresql://postgres@127.0.0.1:1/nowhere", "cannot use"),
        ("sqlite://", "needs a file"),
    ],
)
def test_bad_targets_are_one_line_and_change_nothing(
    hermes_env: dict[str, str], hermes_home: Path, target: str, needle: str
) -> None:
    assert_one_line_failure(hermes(hermes_env, "db", "copy", "--to", target), needle)
    if "mysql" in target or "not a" in target:
        assert not (hermes_home / "state.db").exists()  # refused before the store was opened


def test_the_source_itself_is_refused(hermes_env: dict[str, str], store: Store) -> None:
    fill(store, sessions=2, per_session=2)
    before = dump(f"sqlite:///{store.path}")
    source = f"sqlite:///{store.path}"
    assert_one_line_failure(copy(hermes_env, source, source), "is the store being copied")
    assert dump(source) == before


def _backends(database: str) -> list[tuple[Any, ...]]:
    return _admin(
        "SELECT pid, wait_event_type FROM pg_stat_activity "
        "WHERE datname = %s AND pid <> pg_backend_pid()",
        database,
    )


def _wait_for(condition: Any, what: str, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def test_a_killed_copy_commits_nothing_and_a_rerun_starts_over(
    hermes_env: dict[str, str], store: Store, pg_target: str
) -> None:
    """SIGKILL while the copy is inside its transaction (held there by a lock on messages that
    this test owns): the target keeps its schema and no rows; the rerun copies everything."""
    import psycopg

    fill(store, sessions=10, per_session=5)
    source = f"sqlite:///{store.path}"
    database = pg_target.rsplit("/", 1)[1]
    upgraded = hermes({**hermes_env, "HERMES_DATABASE_URL": pg_target}, "db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    env = {**hermes_env, "HERMES_DATABASE_URL": source}
    with psycopg.connect(pg_target) as blocker:
        blocker.execute("LOCK TABLE messages IN SHARE MODE")  # reads go on; inserts wait
        running = subprocess.Popen(
            [*_script(), "db", "copy", "--to", pg_target, "--batch", "7"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _wait_for(
                lambda: any(kind == "Lock" for _, kind in _backends(database)),
                "the copy to wait on messages",
            )
        finally:
            running.send_signal(signal.SIGKILL)
            running.communicate(timeout=60)
        assert running.returncode == -signal.SIGKILL
        blocker.rollback()
    _wait_for(lambda: not _backends(database), "the killed copy's session to end")
    assert all(rows == [] for rows in dump(pg_target).values())

    rerun = copy(hermes_env, source, pg_target)
    assert rerun.returncode == 0, rerun.stderr
    assert dump(pg_target) == dump(source)


def _script() -> list[str]:
    from tests.integration.test_db_cli import hermes_script

    return [hermes_script()]


def test_copy_help_names_both_directions(hermes_env: dict[str, str]) -> None:
    done = hermes(hermes_env, "db", "copy", "--help")
    assert done.returncode == 0
    assert "postgresql://" in done.stdout and "sqlite:///" in done.stdout


def test_a_killed_copy_to_sqlite_leaves_no_file_and_the_rerun_clears_its_leftover(
    hermes_env: dict[str, str], pg_target: str, tmp_path: Path
) -> None:
    """PostgreSQL -> SQLite, SIGKILLed while the source's messages are locked by this test:
    the target name never appears half-made; the next copy removes the partial file."""
    import psycopg

    source = open_store(pg_target)
    try:
        fill(source, sessions=5, per_session=3)
    finally:
        source.close()
    back = tmp_path / "copy.db"
    database = pg_target.rsplit("/", 1)[1]
    with psycopg.connect(pg_target) as blocker:
        blocker.execute("LOCK TABLE messages IN ACCESS EXCLUSIVE MODE")  # even reads wait
        running = subprocess.Popen(
            [*_script(), "db", "copy", "--to", f"sqlite:///{back}"],
            env={**hermes_env, "HERMES_DATABASE_URL": pg_target},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _wait_for(
                lambda: any(kind == "Lock" for _, kind in _backends(database)),
                "the copy to wait on messages",
            )
        finally:
            running.send_signal(signal.SIGKILL)
            running.communicate(timeout=60)
        blocker.rollback()
    assert not back.exists()
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".copy.db.copying-")]
    assert leftovers, "the killed copy was building its file beside the name"

    rerun = copy(hermes_env, pg_target, f"sqlite:///{back}")
    assert rerun.returncode == 0, rerun.stderr
    assert dump(f"sqlite:///{back}") == dump(pg_target)
    assert sorted(p.name for p in tmp_path.iterdir() if "copy" in p.name) == ["copy.db"]


def test_a_store_grown_on_postgresql_keeps_its_stats_on_a_sqlite_copy(
    hermes_env: dict[str, str], pg_target: str, tmp_path: Path
) -> None:
    """PostgreSQL keeps no source_stats rows (it sums sessions): a SQLite copy of a store that
    grew there must count its sessions by source, not copy the empty table."""
    grown = open_store(pg_target)
    try:
        fill(grown, sessions=6, per_session=3)
    finally:
        grown.close()
    counted = stats_of(pg_target)
    assert counted.sessions == 6 and counted.messages == 6 * 3

    back = tmp_path / "local" / "state.db"
    down = copy(hermes_env, pg_target, f"sqlite:///{back}")
    assert down.returncode == 0, down.stderr
    assert stats_of(f"sqlite:///{back}") == counted
