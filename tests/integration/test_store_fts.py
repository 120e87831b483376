"""The search indexes of state.db: FTS5 with external content, kept by triggers (inserts,
edits, deletes, the tool-output cap) and checked by FTS5's own integrity-check."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import exc, text

from shared.db import Store
from shared.db.sqlite import FTS_TOOL_OUTPUT_CAP
from shared.store import messages as message_rows
from shared.store import sessions as session_rows
from tests.integration.storekit import (
    fill,
    fts_ids,
    fts_integrity_check,
    raw,
)


def db_path(home: Path) -> Path:
    return home / "state.db"


# --- FTS5, external content kept by triggers ---


@pytest.fixture
def chat(store: Store) -> str:
    with store.write() as conn:
        session_rows.create_session(conn, session_id="chat", source="cli", now=1.0)
    return "chat"


def test_fts_follows_insert_update_delete(store: Store, chat: str) -> None:
    with store.write() as conn:
        first = message_rows.append_message(conn, chat, "user", "purple elephant", now=1.0)
        second = message_rows.append_message(conn, chat, "assistant", "green elephant", now=2.0)
        message_rows.append_message(conn, chat, "assistant", None, now=3.0, tool_calls=[{"a": 1}])
    with store.read() as conn:
        assert fts_ids(conn, "elephant") == {first, second}
        assert fts_ids(conn, "purple") == {first}
        fts_integrity_check(conn)

    with store.write() as conn:
        conn.execute(
            text("UPDATE messages SET content = 'orange giraffe' WHERE id = :id"), {"id": first}
        )
    with store.read() as conn:
        assert fts_ids(conn, "purple") == set()
        assert fts_ids(conn, "giraffe") == {first}
        assert fts_ids(conn, "elephant") == {second}
        fts_integrity_check(conn)

    with store.write() as conn:
        conn.execute(text("UPDATE messages SET content = NULL WHERE id = :id"), {"id": second})
        conn.execute(text("DELETE FROM messages WHERE id = :id"), {"id": first})
    with store.read() as conn:
        assert fts_ids(conn, "elephant") == set()
        assert fts_ids(conn, "giraffe") == set()
        fts_integrity_check(conn)


def test_fts_forgets_a_deleted_session(store: Store, chat: str) -> None:
    with store.write() as conn:
        message_rows.append_message(conn, chat, "user", "zanzibar", now=1.0)
        session_rows.delete_session(conn, chat)
    with store.read() as conn:
        assert fts_ids(conn, "zanzibar") == set()
        assert conn.execute(text("SELECT COUNT(*) FROM messages")).scalar() == 0
        fts_integrity_check(conn)


def _long_text(word: str) -> str:
    filler = "lorem ipsum dolor sit amet " * (FTS_TOOL_OUTPUT_CAP // 27 + 20)
    assert len(filler) > FTS_TOOL_OUTPUT_CAP + 100
    return f"{filler}{word} end"


def test_tool_output_is_indexed_only_up_to_the_cap(store: Store, chat: str) -> None:
    content = _long_text("quasar")
    with store.write() as conn:
        tool = message_rows.append_message(
            conn, chat, "tool", content, now=1.0, tool_name="shell", tool_call_id="c1"
        )
        user = message_rows.append_message(conn, chat, "user", content, now=2.0)
        early = message_rows.append_message(conn, chat, "tool", "pulsar " + content, now=3.0)
    with store.read() as conn:
        assert fts_ids(conn, "quasar") == {user}  # past the cap in the tool message: not found
        assert fts_ids(conn, "pulsar") == {early}  # before the cap: found
        assert fts_ids(conn, "lorem") == {tool, user, early}
        [stored] = [m for m in message_rows.transcript(conn, chat) if m.id == tool]
        assert stored.content == content  # the full text is kept, only the index is capped
        fts_integrity_check(conn)


def test_changing_a_role_re_applies_the_cap(store: Store, chat: str) -> None:
    content = _long_text("magnetar")
    with store.write() as conn:
        mid = message_rows.append_message(conn, chat, "user", content, now=1.0)
    with store.write() as conn:
        conn.execute(text("UPDATE messages SET role = 'tool' WHERE id = :id"), {"id": mid})
    with store.read() as conn:
        assert fts_ids(conn, "magnetar") == set()
        fts_integrity_check(conn)
    with store.write() as conn:
        conn.execute(text("UPDATE messages SET role = 'assistant' WHERE id = :id"), {"id": mid})
    with store.read() as conn:
        assert fts_ids(conn, "magnetar") == {mid}
        fts_integrity_check(conn)


def test_fts_integrity_after_many_mixed_changes(store: Store, chat: str) -> None:
    rng = random.Random(3)
    words = ["alpha", "beta", "gamma", "delta", "epsilon"]
    ids: list[int] = []
    with store.write() as conn:
        for i in range(200):
            role = rng.choice(["user", "assistant", "tool"])
            body = " ".join(rng.choice(words) for _ in range(rng.randint(1, 30)))
            if role == "tool" and i % 7 == 0:
                body = _long_text(body)
            ids.append(message_rows.append_message(conn, chat, role, body, now=float(i)))
            if i % 5 == 0:  # tool-call-only turns have no content
                message_rows.append_message(conn, chat, "assistant", None, now=float(i))
    with store.write() as conn:
        for mid in rng.sample(ids, 60):
            conn.execute(
                text("UPDATE messages SET content = :c WHERE id = :id"),
                {"c": rng.choice(words), "id": mid},
            )
        for mid in rng.sample(ids, 40):
            conn.execute(text("DELETE FROM messages WHERE id = :id"), {"id": mid})
    with store.read() as conn:
        fts_integrity_check(conn)
        for word in words:
            expected = {
                int(row[0])
                for row in conn.execute(
                    text(
                        "SELECT id FROM messages WHERE (CASE WHEN role = 'tool'"
                        " THEN substr(content, 1, :cap) ELSE content END) LIKE :w"
                    ),
                    {"cap": FTS_TOOL_OUTPUT_CAP, "w": f"%{word}%"},
                )
            }
            assert fts_ids(conn, word) == expected, word


def test_integrity_check_would_notice_a_stale_index(store: Store, chat: str) -> None:
    """The check the tests lean on is not a no-op: bypass the triggers and it fails."""
    with store.write() as conn:
        mid = message_rows.append_message(conn, chat, "user", "original words", now=1.0)
    with store.write() as conn:
        conn.execute(text("DROP TRIGGER messages_fts_au"))
        conn.execute(
            text("UPDATE messages SET content = 'something else' WHERE id = :id"), {"id": mid}
        )
    with store.read() as conn, pytest.raises(exc.DatabaseError):
        fts_integrity_check(conn)


def test_sqlite_reports_no_problems_after_all_that(store: Store, chat: str) -> None:
    fill(store, sessions=5, messages=6)
    with store.read() as conn:
        assert conn.execute(text("PRAGMA integrity_check")).scalar() == "ok"
        assert conn.execute(text("PRAGMA foreign_key_check")).all() == []


def test_store_raw_sqlite_view_agrees(store: Store, hermes_home: Path) -> None:
    fill(store, sessions=2, messages=2)
    with raw(db_path(hermes_home)) as conn:
        conn.execute("PRAGMA foreign_keys = ON")
        assert conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 4
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(
                "INSERT INTO messages(session_id, role, content, timestamp)"
                " VALUES ('ghost', 'user', 'x', 1)"
            )
