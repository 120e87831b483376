"""Revision 0009: a reset's memory-flush turn names its session in `inbox.flush_session_id`.

Turns recorded before it (the session was only in the event id, `reset-memory:<session>:…`)
get the column filled on upgrade while they can still run; on SQLite and PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from sqlalchemy import Connection, select

from shared.db import open_store
from shared.db.engine import connect
from shared.db.migrate import HEAD, alembic_config
from shared.db.schema import inbox
from tests.integration.storekit import make_db_at, sqlite_url

KEY = "agent:main:telegram:dm:flush-0009"


def _old_turns(conn: Connection) -> None:
    """Rows as revision 0008 wrote them: a route, a waiting and a finished memory turn, and
    a user's message whose event id merely looks alike."""
    conn.exec_driver_sql(
        "INSERT INTO routes (session_key, platform, chat_id, chat_type, next_seq, created_at,"
        f" updated_at) VALUES ('{KEY}', 'telegram', 'flush-0009', 'dm', 3, 1.0, 1.0)"
    )
    rows = [
        (1, "memory_flush", "reset-memory:20240101_000000_aaaaaaaa:99.000", "waiting"),
        (2, "memory_flush", "reset-memory:20240101_000000_bbbbbbbb:98.000", "done"),
        (3, "message", "reset-memory:not-a-flush:1", "waiting"),
    ]
    for seq, kind, event, status in rows:
        conn.exec_driver_sql(
            "INSERT INTO inbox (platform, event_id, session_key, seq, kind, chat_id, chat_type,"
            f" text, status, attempts, received_at) VALUES ('telegram', '{event}', '{KEY}', {seq},"
            f" '{kind}', 'flush-0009', 'dm', 'x', '{status}', 0, 1.0)"
        )


def _flush_sessions(conn: Connection) -> dict[int, str | None]:
    rows = conn.execute(
        select(inbox.c.seq, inbox.c.flush_session_id).where(inbox.c.session_key == KEY)
    ).all()
    return {int(row.seq): row.flush_session_id for row in rows}


EXPECTED = {1: "20240101_000000_aaaaaaaa", 2: None, 3: None}


def test_sqlite_upgrade_fills_the_column_of_waiting_memory_turns(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    make_db_at(path, "0008")
    older = connect(sqlite_url(path))
    try:
        with older.write() as conn:
            _old_turns(conn)
    finally:
        older.close()
    upgraded = open_store(sqlite_url(path))
    try:
        with upgraded.read() as conn:
            assert _flush_sessions(conn) == EXPECTED
    finally:
        upgraded.close()


def test_postgresql_upgrade_fills_the_column_and_downgrade_drops_it(postgres_url: str) -> None:
    store = open_store(postgres_url)
    try:
        with store.write() as conn:
            conn.execute(inbox.delete().where(inbox.c.session_key == KEY))
            conn.exec_driver_sql(f"DELETE FROM routes WHERE session_key = '{KEY}'")
            command.downgrade(alembic_config(conn), "0008")
            _old_turns(conn)
            command.upgrade(alembic_config(conn), HEAD)
        with store.read() as conn:
            assert _flush_sessions(conn) == EXPECTED
    finally:
        with store.write() as conn:
            conn.execute(inbox.delete().where(inbox.c.session_key == KEY))
            conn.exec_driver_sql(f"DELETE FROM routes WHERE session_key = '{KEY}'")
        store.close()
