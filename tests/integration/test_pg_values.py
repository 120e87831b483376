"""Values SQLite takes and PostgreSQL refused: one rule at the edge, the same on both.

A NUL in text becomes U+FFFD (shared.surrogates' rule for text from outside) where a turn is
accepted, a message is stored and an export is imported; counts and token totals are 64-bit
on both, and a value past 64 bits is a bad line of an import, never a database error.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from producers.intake import accept
from shared.db import Store
from shared.db.schema import inbox, messages, sessions
from shared.ports import RecordingWaker
from shared.settings import Settings
from shared.store.messages import append_message
from shared.store.sessions import create_session, get_session
from shared.turns import Attachment
from tests.integration.test_cli_sessions_support import NOW, invoke
from tests.pipeline_helpers import turn

pytestmark = pytest.mark.both_databases

BIG = 2**40


def test_a_turn_with_nul_is_accepted_with_the_nul_replaced(
    settings: Settings, store: Store
) -> None:
    sent = turn(
        1,
        text="tab\x00le",
        attachments=(Attachment("file", name="a\x00.txt"),),
    )
    accepted = accept(store, RecordingWaker(), sent, settings=settings, clock=time.time)
    assert not accepted.duplicate
    with store.read() as conn:
        row = conn.execute(select(inbox)).one()
    assert row.text == "tab\ufffdle"
    assert json.loads(row.attachments) == [{"kind": "file", "name": "a\ufffd.txt"}]
    again = accept(store, RecordingWaker(), sent, settings=settings, clock=time.time)
    assert again.duplicate and again.turn_id == accepted.turn_id  # a redelivery is a no-op


def test_a_reply_or_tool_output_with_nul_is_stored_with_it_replaced(store: Store) -> None:
    with store.write() as conn:
        create_session(conn, session_id="s", source="cli", now=NOW)
        append_message(conn, "s", "tool", "bin\x00ary", now=NOW, tool_name="read")
        append_message(conn, "s", "assistant", None, now=NOW, tool_calls=[{"arguments": "x\x00"}])
    with store.read() as conn:
        rows = conn.execute(select(messages.c.content, messages.c.tool_calls)).all()
    assert rows[0].content == "bin\ufffdary"
    assert json.loads(rows[1].tool_calls) == [{"arguments": "x\x00"}]  # JSON escapes it


def test_token_counts_past_32_bits_are_kept(store: Store) -> None:
    with store.write() as conn:
        create_session(conn, session_id="s", source="cli", now=NOW)
        for _ in range(3):
            append_message(
                conn,
                "s",
                "assistant",
                "long",
                now=NOW,
                token_count=BIG,
                input_tokens=BIG,
                output_tokens=BIG,
            )
    with store.read() as conn:
        record = get_session(conn, "s")
        counts = conn.execute(select(messages.c.token_count)).scalars().all()
    assert record is not None
    assert (record.input_tokens, record.output_tokens) == (3 * BIG, 3 * BIG)
    assert counts == [BIG] * 3


def line(session_id: str, content: str, **extra: object) -> str:
    doc = {
        "id": session_id,
        "source": "cli",
        "started_at": NOW,
        "messages": [{"role": "user", "content": content, "timestamp": NOW}],
        **extra,
    }
    return json.dumps(doc)


def test_an_export_with_nul_and_big_counts_imports_the_same_on_both(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    path = tmp_path / "in.jsonl"
    rows = [
        line("nul", "a\x00b", title="Nul\x00 title"),
        line("big", "many tokens", input_tokens=BIG, output_tokens=BIG),
    ]
    doc = json.loads(line("tokens", "x"))
    doc["messages"][0]["token_count"] = BIG
    rows.append(json.dumps(doc))
    path.write_text("\n".join(rows) + "\n")
    result = invoke(settings, ["sessions", "import", str(path)])
    assert result.stderr == ""
    assert result.exit_code == 0
    with store.read() as conn:
        got = {
            row.id: row
            for row in conn.execute(
                select(sessions.c.id, sessions.c.input_tokens, sessions.c.title)
            )
        }
        contents = dict(conn.execute(select(messages.c.session_id, messages.c.content)).all())
        token = conn.execute(
            select(messages.c.token_count).where(messages.c.session_id == "tokens")
        ).scalar_one()
    assert contents["nul"] == "a\ufffdb"
    assert got["nul"].title == "Nul\ufffd title"
    assert got["big"].input_tokens == BIG
    assert token == BIG


def test_a_count_past_64_bits_is_a_bad_line_and_the_good_lines_stay(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    path = tmp_path / "in.jsonl"
    rows = [line("ok1", "x"), line("huge", "y", input_tokens=2**64), line("ok2", "z")]
    path.write_text("\n".join(rows) + "\n")
    result = invoke(settings, ["sessions", "import", str(path)])
    assert result.exit_code == 1
    assert result.stderr == "line 2: input_tokens must be an integer\n"
    with store.read() as conn:
        assert sorted(conn.execute(select(sessions.c.id)).scalars()) == ["ok1", "ok2"]
