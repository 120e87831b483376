"""`hermes sessions export` and `import`: JSONL round trips, bad lines, idempotence, parents."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from shared.db import SessionNotFound, Store, open_store
from shared.db.schema import sessions
from shared.settings import Settings, load_settings
from shared.store.messages import transcript
from shared.store.session_listing import stats
from shared.store.sessions import get_session
from shared.titles import TitleSource
from tests.integration.test_cli_sessions_support import (
    NOW,
    Msg,
    Seed,
    elsewhere,
    good,
    hermes,
    invoke,
    message_total,
    read_jsonl,
    seed,
    session_ids,
    without_message_ids,
)

pytestmark = pytest.mark.both_databases

ROOT = "20250601_090000_a0a0a0"
MIDDLE = "20250602_090000_b1b1b1b1"
LEAF = "20250603_090000_c2c2c2"
TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "web_search", "arguments": '{"q": "東京 天気"}'},
}


def rich_sessions() -> list[Seed]:
    """A CJK title, tool calls and a tool reply, a parented chain, tokens and platform ids."""
    return [
        Seed(
            ROOT,
            title="東京の天気 ☀️ 調べ",
            started=NOW - 3 * 86_400,
            ended=NOW - 2 * 86_400,
            messages=[
                Msg("user", "東京の天気は？"),
                Msg("assistant", None, tool_calls=[TOOL_CALL], token_count=12),
                Msg("tool", '{"temp": 21}', tool_call_id="call_1", tool_name="web_search"),
                Msg("assistant", "晴れ、21度です。", token_count=9),
            ],
            extra={"model": "gpt-x", "system_prompt": "Be brief.", "input_tokens": 40},
        ),
        Seed(
            MIDDLE,
            source="telegram",
            title="東京の天気 ☀️ 調べ #2",
            title_source=TitleSource.DERIVED,
            started=NOW - 86_400,
            parent=ROOT,
            messages=[Msg("user", "and tomorrow?", platform_message_id="tg-77")],
            extra={"chat_id": "-100123", "chat_type": "group", "user_id": "42"},
        ),
        Seed(LEAF, started=NOW - 600, parent=MIDDLE, messages=[]),
    ]


@pytest.fixture
def other(tmp_path: Path) -> Settings:
    home = tmp_path / "elsewhere"
    home.mkdir()
    return load_settings({"HERMES_HOME": str(home)})


def test_export_writes_every_column_and_every_message_field(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    seed(store, *rich_sessions())
    out = tmp_path / "backup.jsonl"
    result = invoke(settings, ["sessions", "export", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"Exported 3 sessions (5 messages) to {out}."
    docs = read_jsonl(out)
    assert [doc["id"] for doc in docs] == [ROOT, MIDDLE, LEAF]
    assert set(docs[0]) == {c.name for c in sessions.columns} | {"messages"}
    root = docs[0]
    assert root["title"] == "東京の天気 ☀️ 調べ" and root["model"] == "gpt-x"
    assert root["message_count"] == 4 and root["input_tokens"] == 40
    assert root["ended_at"] == NOW - 2 * 86_400 and root["end_reason"] == "test"
    first, call, reply, _last = root["messages"]
    for message in root["messages"]:
        assert {"id", "role", "content", "tool_calls", "tool_call_id", "tool_name"} <= set(message)
        assert {"timestamp", "token_count", "platform_message_id"} <= set(message)
    assert first["content"] == "東京の天気は？" and first["timestamp"] == NOW - 3 * 86_400 + 1
    assert call["tool_calls"] == [TOOL_CALL] and call["token_count"] == 12
    assert (reply["tool_call_id"], reply["tool_name"]) == ("call_1", "web_search")
    assert docs[1]["parent_session_id"] == ROOT and docs[2]["parent_session_id"] == MIDDLE
    assert docs[1]["messages"][0]["platform_message_id"] == "tg-77"
    assert "東京" in out.read_text(encoding="utf-8")  # UTF-8, not \\u escapes
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_round_trip_into_an_empty_store_gives_the_same_export(
    settings: Settings, store: Store, other: Settings, tmp_path: Path
) -> None:
    seed(store, *rich_sessions())
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    assert invoke(settings, ["sessions", "export", str(first)]).exit_code == 0

    result = invoke(other, ["sessions", "import", str(first)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (
        "Imported 3 sessions (5 messages), skipped 0 already present, 0 bad lines."
    )
    assert invoke(other, ["sessions", "export", str(second)]).exit_code == 0
    assert without_message_ids(read_jsonl(second)) == without_message_ids(read_jsonl(first))

    imported = open_store(other.resolved_database_url)
    try:
        with imported.read() as conn:
            root = transcript(conn, ROOT)
            totals = stats(conn)
        assert [m.role for m in root] == ["user", "assistant", "tool", "assistant"]
        assert root[1].tool_call_list == [TOOL_CALL]
        assert totals.sessions == 3 and totals.messages == 5
        assert dict((s, n) for s, n, _ in totals.by_source) == {"cli": 2, "telegram": 1}
    finally:
        imported.close()


def test_import_never_reuses_message_ids_but_keeps_their_order(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    seed(store, Seed("20250615_000000_eeeeee", messages=[Msg("user", "taken")]))
    line = {
        "id": "20250615_000001_ffffff",
        "source": "cli",
        "started_at": NOW,
        "messages": [
            {"id": 1, "role": "user", "content": "first", "timestamp": NOW + 1},
            {"id": 900, "role": "assistant", "content": "second", "timestamp": NOW + 2},
            {"id": 5, "role": "user", "content": "third", "timestamp": NOW + 3},
        ],
    }
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(line) + "\n")
    assert invoke(settings, ["sessions", "import", str(path)]).exit_code == 0
    with store.read() as conn:
        messages = transcript(conn, "20250615_000001_ffffff")
        record = get_session(conn, "20250615_000001_ffffff")
    assert [m.content for m in messages] == ["first", "second", "third"]
    assert [m.id for m in messages] == sorted(m.id for m in messages)
    assert messages[0].id != 1 and 900 not in [m.id for m in messages]
    assert record is not None and record.last_active_at == NOW + 3  # from the last message
    assert record.message_count == 3


def test_export_to_stdout_is_pure_jsonl(settings: Settings, store: Store) -> None:
    seed(store, *rich_sessions())
    result = invoke(settings, ["sessions", "export", "-"])
    assert result.exit_code == 0
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    assert [doc["id"] for doc in docs] == [ROOT, MIDDLE, LEAF]
    assert "Exported 3 sessions (5 messages) to stdout." in result.stderr


def test_export_filters_by_source_and_session(settings: Settings, store: Store) -> None:
    seed(store, *rich_sessions())
    by_source = invoke(settings, ["sessions", "export", "-", "--source", "telegram"])
    assert [json.loads(line)["id"] for line in by_source.stdout.splitlines()] == [MIDDLE]
    by_prefix = invoke(settings, ["sessions", "export", "-", "--session-id", "20250603"])
    assert [json.loads(line)["id"] for line in by_prefix.stdout.splitlines()] == [LEAF]
    # A title names the newest of its lineage, through parent links: "…調べ" → "…調べ #2" →
    # its untitled continuation.
    by_title = invoke(settings, ["sessions", "export", "-", "--session-id", "東京の天気 ☀️ 調べ"])
    assert [json.loads(line)["id"] for line in by_title.stdout.splitlines()] == [LEAF]


def test_export_of_an_unknown_session_writes_no_file(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    out = tmp_path / "x.jsonl"
    result = invoke(settings, ["sessions", "export", str(out), "--session-id", "nope"])
    assert result.exit_code == 1 and isinstance(result.exception, SessionNotFound)
    assert list(tmp_path.iterdir()) == [tmp_path / "hermes"]


def test_export_to_an_unwritable_place_is_one_line(
    hermes_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    seed(store, *rich_sessions())
    done = hermes(hermes_env, "sessions", "export", str(tmp_path / "missing" / "x.jsonl"))
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "No such file or directory" in done.stderr


def test_export_and_import_through_the_script_with_stdin(
    hermes_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    seed(store, *rich_sessions())
    exported = hermes(hermes_env, "sessions", "export", "-")
    assert exported.returncode == 0, exported.stderr
    assert exported.stderr == "Exported 3 sessions (5 messages) to stdout.\n"  # no progress bar
    env = elsewhere(hermes_env, tmp_path / "new-home")
    done = hermes(env, "sessions", "import", "-", input=exported.stdout)
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout == "Imported 3 sessions (5 messages), skipped 0 already present, 0 bad lines.\n"
    )
    assert done.stderr == ""
    again = hermes(env, "sessions", "export", "-")
    assert without_message_ids([json.loads(x) for x in again.stdout.splitlines()]) == (
        without_message_ids([json.loads(x) for x in exported.stdout.splitlines()])
    )


def test_reimport_is_idempotent(
    settings: Settings, store: Store, other: Settings, tmp_path: Path
) -> None:
    seed(store, *rich_sessions())
    path = tmp_path / "b.jsonl"
    invoke(settings, ["sessions", "export", str(path)])
    result = invoke(settings, ["sessions", "import", str(path)])
    assert result.exit_code == 0
    assert result.output.strip() == (
        "Imported 0 sessions (0 messages), skipped 3 already present, 0 bad lines."
    )
    assert message_total(store) == 5
    invoke(other, ["sessions", "import", str(path)])
    twice = invoke(other, ["sessions", "import", str(path)])
    assert "Imported 0 sessions (0 messages), skipped 3 already present" in twice.output


BAD_LINES = {
    "not json": "invalid JSON",
    '["a", "list"]': "expected a JSON object",
    json.dumps({"id": "x1", "source": "cli", "messages": []}): "missing required field: started_at",
    json.dumps({"source": "cli", "started_at": 1, "messages": []}): "missing required field: id",
    good("x2", started_at="yesterday"): "started_at must be a number",
    good("x3", messages={"role": "user"}): "messages must be a list",
    good("x4", messages=[{"content": "no role"}]): "message 1 needs a role",
    good("x5", messages=[{"role": "user", "token_count": "7"}]): "token_count must be an integer",
    good("x6", title="t" * 101): "bad title",
    good("x7", title="\u200b\u202e "): "bad title",
    good("x8", title="taken title"): "already used by session 20250615_000000_aaaaaa",
    good("x9", title_source="robot", title="fine"): "title_source must be one of",
    good("x10", message_count="many", ended_at=True): "ended_at must be a number",
}


def test_bad_lines_are_reported_by_number_and_write_nothing(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    seed(store, Seed("20250615_000000_aaaaaa", title="taken title"))
    lines = [good("ok-first", title="ok first"), *BAD_LINES, "", good("ok-last")]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    result = invoke(settings, ["sessions", "import", str(path)])

    assert result.exit_code == 1
    reported = result.stderr.splitlines()
    assert len(reported) == len(BAD_LINES)
    for number, (reason, report) in enumerate(zip(BAD_LINES.values(), reported, strict=True), 2):
        assert report.startswith(f"line {number}: "), report
        assert reason in report, (reason, report)
    assert result.stdout.strip() == (
        f"Imported 2 sessions (2 messages), skipped 0 already present, {len(BAD_LINES)} bad lines."
    )
    assert session_ids(store) == ["20250615_000000_aaaaaa", "ok-first", "ok-last"]
    assert message_total(store) == 3


def test_the_same_title_twice_in_one_file_keeps_the_first(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    path = tmp_path / "twice.jsonl"
    path.write_text(good("a1", title="同じ") + "\n" + good("a2", title="同じ") + "\n")
    result = invoke(settings, ["sessions", "import", str(path)])
    assert result.exit_code == 1
    assert result.stderr.startswith("line 2: Title '同じ' is already used by session a1.")
    assert session_ids(store) == ["a1"] and message_total(store) == 1


def test_children_may_come_before_parents_and_missing_parents_are_dropped(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    seed(store, Seed("already-here"))
    path = tmp_path / "family.jsonl"
    path.write_text(
        "\n".join(
            [
                good("child", parent_session_id="parent"),
                good("orphan", parent_session_id="gone-forever"),
                good("adopted", parent_session_id="already-here"),
                good("parent"),
            ]
        )
    )
    result = invoke(settings, ["sessions", "import", str(path)])
    assert result.exit_code == 0, result.output
    assert "1 parent link dropped" in result.stderr
    with store.read() as conn:
        parents = {
            sid: record.parent_session_id
            for sid in ("child", "orphan", "adopted", "parent")
            if (record := get_session(conn, sid)) is not None
        }
    assert parents == {
        "child": "parent",
        "orphan": None,
        "adopted": "already-here",
        "parent": None,
    }


def test_import_of_a_missing_file_is_one_line(hermes_env: dict[str, str], tmp_path: Path) -> None:
    done = hermes(hermes_env, "sessions", "import", str(tmp_path / "nope.jsonl"))
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "No such file or directory" in done.stderr


def test_import_rejects_invalid_utf8_by_line(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    path = tmp_path / "bytes.jsonl"
    path.write_bytes(good("u1").encode() + b"\n" + b'{"id": "\xff"}\n')
    result = invoke(settings, ["sessions", "import", str(path)])
    assert result.exit_code == 1
    assert result.stderr.startswith("line 2: not UTF-8 text")
    assert session_ids(store) == ["u1"]


def test_a_lone_surrogate_is_a_bad_line_and_the_good_lines_stay(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    # Valid JSON (json.dumps escapes it as \ud800) that no UTF-8 database can store.
    bad = json.dumps(
        {
            "id": "sur",
            "source": "cli",
            "started_at": NOW,
            "messages": [{"role": "user", "content": "bad \ud800", "timestamp": NOW}],
        }
    )
    assert "\\ud800" in bad
    path = tmp_path / "surrogate.jsonl"
    path.write_text(good("s-before") + "\n" + bad + "\n" + good("s-after") + "\n")
    result = invoke(settings, ["sessions", "import", str(path)])
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stderr == "line 2: message 1: content is not valid Unicode text" + (
        " (lone surrogate at character 5)\n"
    )
    assert result.stdout == (
        "Imported 2 sessions (2 messages), skipped 0 already present, 1 bad line.\n"
    )
    assert session_ids(store) == ["s-after", "s-before"] and message_total(store) == 2


def test_the_import_summary_counts_in_words(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    path = tmp_path / "one.jsonl"
    path.write_text(good("only") + "\n")
    result = invoke(settings, ["sessions", "import", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        "Imported 1 session (1 message), skipped 0 already present, 0 bad lines.\n"
    )
