"""shared.store.portability: line checking, tool_calls, paging, per-line atomicity, parents."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import func, select

from shared.db import Store
from shared.db.schema import messages, sessions
from shared.store import portability as port
from shared.store.messages import append_message
from shared.store.session_listing import stats
from shared.store.sessions import create_session, get_session

NOW = 1_750_000_000.0


def line(**values: Any) -> str:
    doc: dict[str, Any] = {"id": "s1", "source": "cli", "started_at": NOW, "messages": []}
    doc.update(values)
    return json.dumps(doc, ensure_ascii=False)


def counts(store: Store) -> tuple[int, int]:
    with store.read() as conn:
        return (
            int(conn.execute(select(func.count()).select_from(sessions)).scalar_one()),
            int(conn.execute(select(func.count()).select_from(messages)).scalar_one()),
        )


# --- parse_line ---


def test_a_minimal_line_gets_defaults() -> None:
    parsed = port.parse_line(line())
    assert parsed.id == "s1" and parsed.parent_id is None and parsed.messages == []
    assert parsed.values == {"id": "s1", "source": "cli", "started_at": NOW, "last_active_at": NOW}


def test_last_active_defaults_to_the_last_message_and_timestamps_carry_forward() -> None:
    parsed = port.parse_line(
        line(
            messages=[
                {"role": "user", "content": "a", "timestamp": NOW + 5},
                {"role": "assistant", "content": "b"},
            ]
        )
    )
    assert [m["timestamp"] for m in parsed.messages] == [NOW + 5, NOW + 5]
    assert parsed.values["last_active_at"] == NOW + 5
    assert set(parsed.messages[0]) == set(port.MESSAGE_FIELDS)


def test_message_count_from_the_file_is_ignored_and_unknown_keys_too() -> None:
    parsed = port.parse_line(line(message_count=99, from_the_future=True, input_tokens=None))
    assert "message_count" not in parsed.values and "from_the_future" not in parsed.values
    assert "input_tokens" not in parsed.values  # null → the column default (0)


def test_integers_are_accepted_for_floats_and_titles_are_cleaned() -> None:
    parsed = port.parse_line(line(started_at=1_700_000_000, title="  a\u200b  b\t c "))
    assert parsed.values["started_at"] == 1_700_000_000.0
    assert isinstance(parsed.values["started_at"], float)
    assert parsed.values["title"] == "a b c"


def test_a_self_parent_is_dropped() -> None:
    assert port.parse_line(line(parent_session_id="s1")).parent_id is None
    assert port.parse_line(line(parent_session_id="p")).parent_id == "p"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("{", "invalid JSON"),
        ("[" * 100_000, "invalid JSON"),
        ("42", "expected a JSON object"),
        (json.dumps({"id": "s", "source": "cli", "started_at": 1}), "missing required field"),
        (line(id=None), "missing required field: id"),
        (line(id=""), "id cannot be empty"),
        (line(source="  "), "source cannot be empty"),
        (line(id=7), "id must be a string"),
        (line(started_at=True), "started_at must be a number"),
        ('{"id":"s","source":"c","started_at":NaN,"messages":[]}', "finite"),
        (line(input_tokens=1.5), "input_tokens must be an integer"),
        (line(input_tokens=2**64), "input_tokens must be an integer"),
        (line(title=""), "bad title"),
        (line(title_source="someone"), "title_source must be one of"),
        (line(messages="hi"), "messages must be a list"),
        (line(messages=["hi"]), "message 1 must be an object"),
        (line(messages=[{"role": "user"}, {"role": ""}]), "message 2 needs a role"),
        (line(messages=[{"role": "user", "timestamp": "noon"}]), "message 1: timestamp"),
        (line(messages=[{"role": "user", "tool_calls": 3}]), "message 1: tool_calls"),
        (line(messages=[{"role": "user", "content": ["a"]}]), "message 1: content"),
        (line(messages=[{"role": "user", "content": "bad \ud800"}]), "message 1: content is not"),
        (line(title="t\udfff"), "title is not valid Unicode text"),
        (line(user_id="\ud800"), "user_id is not valid Unicode text"),
        (line(messages=[{"role": "user", "tool_calls": ["\ud83d"]}]), "message 1: tool_calls"),
        (line(messages=[{"role": "tool", "tool_calls": "x\udc00"}]), "message 1: tool_calls"),
        (line(input_tokens=-1), "input_tokens cannot be negative"),
        (line(output_tokens=-5), "output_tokens cannot be negative"),
        (line(messages=[{"role": "user", "token_count": -2}]), "message 1: token_count cannot"),
        (line(ended_at=NOW - 1), "ended_at cannot be before started_at"),
    ],
)
def test_bad_lines_say_why(raw: str, reason: str) -> None:
    with pytest.raises(port.BadLine, match=reason.replace("(", r"\(")):
        port.parse_line(raw)


def test_a_lone_surrogate_escape_is_valid_json_but_a_bad_line() -> None:
    raw = (
        '{"id":"s","source":"cli","started_at":1,'
        '"messages":[{"role":"user","content":"bad \\ud800"}]}'
    )
    assert json.loads(raw)["messages"][0]["content"] == "bad \ud800"  # the JSON itself is fine
    with pytest.raises(port.BadLine, match="lone surrogate at character 5"):
        port.parse_line(raw)


def test_zero_tokens_and_an_end_at_the_start_are_fine() -> None:
    parsed = port.parse_line(
        line(
            input_tokens=0,
            output_tokens=3,
            ended_at=NOW,
            messages=[{"role": "user", "token_count": 0}],
        )
    )
    assert parsed.values["ended_at"] == NOW and parsed.messages[0]["token_count"] == 0


def test_a_title_without_its_source_is_the_users() -> None:
    assert port.parse_line(line(title="named")).values["title_source"] == "user"
    assert (
        port.parse_line(line(title="named", title_source="auto")).values["title_source"] == "auto"
    )
    assert "title_source" not in port.parse_line(line()).values
    assert "title_source" not in port.parse_line(line(title=None)).values


def test_bytes_that_are_not_utf8_are_a_bad_line() -> None:
    with pytest.raises(port.BadLine, match="not UTF-8"):
        port.parse_line(b'{"id": "\xc3\x28"}')


# --- tool_calls ---


@pytest.mark.parametrize(
    ("stored", "exported"),
    [
        (None, None),
        ('[{"id":"c"}]', [{"id": "c"}]),
        ('{"id":"c"}', {"id": "c"}),
        ("not json", "not json"),
        ('"a json string"', '"a json string"'),
        ("3", "3"),
    ],
)
def test_tool_calls_decode_only_lists_and_objects(stored: str | None, exported: Any) -> None:
    assert port.decode_tool_calls(stored) == exported


def test_tool_calls_round_trip_exactly(store: Store) -> None:
    stored_forms = ['[{"id":"c","function":{"name":"f"}}]', "legacy text", '"quoted"', None]
    with store.write() as conn:
        create_session(conn, session_id="t", source="cli", now=NOW)
        for form in stored_forms:
            append_message(conn, "t", "assistant", None, now=NOW, tool_calls=form)
    with store.read() as conn:
        exported = list(port.export_sessions(conn))
    with store.write() as conn:
        conn.execute(sessions.delete())
    report = port.import_lines(store, [(1, port.encode_line(exported[0]))])
    assert report.imported == 1
    with store.read() as conn:
        again = conn.execute(select(messages.c.tool_calls).order_by(messages.c.id)).scalars().all()
    assert list(again) == stored_forms


# --- export paging ---


def test_export_pages_through_every_session_in_id_order(store: Store) -> None:
    ids = [f"2025061{i % 10}_{i:06d}_abcdef" for i in range(23)]
    with store.write() as conn:
        for session_id in ids:
            create_session(conn, session_id=session_id, source="cli", now=NOW)
            append_message(conn, session_id, "user", session_id, now=NOW)
    with store.read() as conn:
        docs = list(port.export_sessions(conn, page=5))
        assert port.count_exportable(conn) == 23
    assert [doc["id"] for doc in docs] == sorted(ids)
    assert all(doc["messages"][0]["content"] == doc["id"] for doc in docs)


def test_export_filters(store: Store) -> None:
    with store.write() as conn:
        create_session(conn, session_id="a", source="cli", now=NOW)
        create_session(conn, session_id="b", source="slack", now=NOW)
    with store.read() as conn:
        assert [d["id"] for d in port.export_sessions(conn, source="slack")] == ["b"]
        assert [d["id"] for d in port.export_sessions(conn, session_id="a")] == ["a"]
        assert port.count_exportable(conn, source="slack", session_id="a") == 0


# --- import: atomic lines, counters, parents ---


def test_a_line_that_fails_in_the_database_leaves_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = port.parse_line

    def sabotage(raw: bytes | str) -> port.ParsedSession:
        parsed = real(raw)
        if parsed.id == "broken":  # the session row goes in, then a message violates NOT NULL
            rows = [{**parsed.messages[0], "role": None}]
            return port.ParsedSession(parsed.values, None, [parsed.messages[0], *rows])
        return parsed

    monkeypatch.setattr(port, "parse_line", sabotage)
    one = [{"role": "user", "content": "x", "timestamp": NOW}]
    report = port.import_lines(
        store,
        [
            (1, line(id="before", messages=one)),
            (2, line(id="broken", messages=one)),
            (3, line(id="after", messages=one)),
        ],
    )
    assert report.imported == 2 and report.messages == 2
    assert [number for number, _ in report.bad] == [2]
    assert "rejected by the database" in report.bad[0][1]
    assert counts(store) == (2, 2)
    with store.read() as conn:
        assert get_session(conn, "broken") is None


@pytest.mark.parametrize(
    ("spoil", "reason"),
    [
        # Not an IntegrityError: the driver refuses to bind a dict (a DBAPIError).
        (lambda row: {**row, "content": {"not": "text"}}, "rejected by the database"),
        # The driver's own UnicodeEncodeError, which SQLAlchemy does not wrap.
        (lambda row: {**row, "content": "bad \ud800"}, "rejected by the database"),
    ],
    ids=["unbindable", "surrogate"],
)
def test_any_database_error_is_one_bad_line_and_the_batch_stands(
    store: Store, monkeypatch: pytest.MonkeyPatch, spoil: Any, reason: str
) -> None:
    real = port.parse_line

    def sabotage(raw: bytes | str) -> port.ParsedSession:
        parsed = real(raw)  # checked clean, then spoiled past the checks
        if parsed.id == "broken":
            return port.ParsedSession(parsed.values, None, [spoil(parsed.messages[0])])
        return parsed

    monkeypatch.setattr(port, "parse_line", sabotage)
    one = [{"role": "user", "content": "x", "timestamp": NOW}]
    report = port.import_lines(
        store,
        [(n, line(id=sid, messages=one)) for n, sid in enumerate(("a", "broken", "b"), 1)],
    )
    assert (report.imported, report.messages) == (2, 2)
    assert [number for number, _ in report.bad] == [2] and reason in report.bad[0][1]
    assert counts(store) == (2, 2)
    with store.read() as conn:
        assert get_session(conn, "broken") is None


def test_counters_stay_right_after_import(store: Store) -> None:
    msgs = [{"role": "user", "content": str(i), "timestamp": NOW + i} for i in range(4)]
    port.import_lines(
        store,
        [(1, line(id="a", messages=msgs, message_count=1)), (2, line(id="b", source="slack"))],
    )
    with store.read() as conn:
        record = get_session(conn, "a")
        totals = stats(conn)
    assert record is not None and record.message_count == 4
    assert totals.sessions == 2 and totals.messages == 4
    assert sorted(totals.by_source) == [("cli", 1, 4), ("slack", 1, 0)]


def test_batches_are_flushed_and_lines_keep_their_numbers(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(port, "IMPORT_BATCH_LINES", 3)
    lines = [(n, line(id=f"s{n}") if n % 4 else "oops") for n in range(1, 11)]
    seen: list[int] = []
    report = port.import_lines(store, lines, progress=seen.append)
    assert report.imported == 8
    assert [number for number, _ in report.bad] == [4, 8]
    assert len(seen) == 10
    assert counts(store) == (8, 0)


def test_blank_lines_are_not_bad(store: Store) -> None:
    report = port.import_lines(store, [(1, "\n"), (2, "   "), (3, line())])
    assert (report.imported, report.bad) == (1, [])


def test_parents_are_linked_only_when_present_at_the_end(store: Store) -> None:
    with store.write() as conn:
        create_session(conn, session_id="old", source="cli", now=NOW)
    report = port.import_lines(
        store,
        [
            (1, line(id="kid", parent_session_id="dad")),
            (2, line(id="dad", parent_session_id="old")),
            (3, line(id="lost", parent_session_id="nobody")),
        ],
    )
    assert (report.parents_linked, report.parents_dropped) == (2, 1)
    with store.read() as conn:
        parents = {
            sid: r.parent_session_id
            for sid in ("kid", "dad", "lost")
            if (r := get_session(conn, sid))
        }
    assert parents == {"kid": "dad", "dad": "old", "lost": None}


def test_a_skipped_session_is_left_alone(store: Store) -> None:
    with store.write() as conn:
        create_session(conn, session_id="s1", source="cli", now=NOW, title="mine")
    report = port.import_lines(store, [(1, line(title="theirs", parent_session_id="x"))])
    assert (report.imported, report.skipped, report.parents_dropped) == (0, 1, 0)
    with store.read() as conn:
        record = get_session(conn, "s1")
    assert record is not None and record.title == "mine"
