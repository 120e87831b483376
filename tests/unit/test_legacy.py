"""Reading Hermes' old transcript files: golden fixtures (tests/fixtures/legacy: a real file's
shape, and the session document it must become), names that are not session ids, and the
documents passing the store's own import checks."""

from __future__ import annotations

import json
from datetime import UTC, timedelta, timezone
from pathlib import Path

import pytest

from shared.legacy import read_transcript, session_id_of, transcript_files
from shared.store.portability import parse_document

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "legacy"
GOLDEN = sorted(p.name.removesuffix(".expected.json") for p in FIXTURES.glob("*.expected.json"))


@pytest.mark.parametrize("name", GOLDEN)
def test_golden_transcripts_become_these_sessions(name: str) -> None:
    expected = json.loads((FIXTURES / f"{name}.expected.json").read_text(encoding="utf-8"))
    transcript = read_transcript(FIXTURES / f"{name}.jsonl", UTC)
    assert transcript.refused is None
    assert transcript.document == expected["document"]
    assert [list(bad) for bad in transcript.bad] == expected["bad"]
    parsed = parse_document(transcript.document)  # the store's import accepts it as it is
    assert len(parsed.messages) == transcript.messages
    assert all(row["timestamp"] is not None for row in parsed.messages)


def test_the_gateway_transcript_keeps_tool_calls_and_the_platform_message_ids() -> None:
    doc = read_transcript(FIXTURES / "20250314_091502_4077bccc.jsonl", UTC).document
    assert doc is not None
    assert (doc["source"], doc["model"]) == ("telegram", "anthropic/claude-sonnet-4")
    roles = [m["role"] for m in doc["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert doc["messages"][1]["tool_calls"][0]["function"]["name"] == "terminal"
    assert doc["messages"][2]["tool_call_id"] == "call_001"
    assert [m["platform_message_id"] for m in doc["messages"] if m["role"] == "user"] == [
        "4412",
        "4415",
    ]
    assert doc["ended_at"] == doc["last_active_at"] >= doc["started_at"]


def test_zone_less_times_are_read_in_the_given_zone() -> None:
    path = FIXTURES / "20250316_080000_5ee5ee55.jsonl"
    utc = read_transcript(path, UTC).document
    berlin = read_transcript(path, timezone(timedelta(hours=1))).document
    assert utc is not None and berlin is not None
    assert utc["started_at"] - berlin["started_at"] == 3600


def test_a_bad_line_is_reported_and_the_rest_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "20250101_000000_abcdef.jsonl"
    path.write_bytes(
        b'{"role": "user", "content": "kept", "timestamp": "2025-01-01T00:00:00"}\n'
        b"\xff\xfe not text\n"
        b'{"role": "assistant", "content": "also kept"}\n'
        b'{"role": "session_meta", "model": "m", "platform": "slack"}\n'
        b'{"role": "user", "content": "half a pair \\ud800 of surrogates"}\n'
    )
    transcript = read_transcript(path, UTC)
    assert transcript.bad == [
        (2, "not UTF-8 text (byte 1)"),
        (5, "not valid Unicode text (a lone surrogate escape)"),
    ]
    assert transcript.document is not None
    assert [m["content"] for m in transcript.document["messages"]] == ["kept", "also kept"]
    assert transcript.document["source"] == "slack"  # a late meta line still names the platform


@pytest.mark.parametrize(
    "name",
    [
        "notes.jsonl",
        "20250101_000000_ABCDEF.jsonl",  # ids are lowercase
        "20250101_000000_abcde.jsonl",  # 5 hex digits
        "20250101_000000_abcdef1.jsonl",  # 7
        "..jsonl",
        "20250101_000000_abcdef\n.jsonl",
        "session_20250101_000000_abcdef.jsonl",
    ],
)
def test_a_file_not_named_after_a_session_id_is_refused_unread(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text('{"role": "user", "content": "x"}\n')
    assert session_id_of(path) is None
    transcript = read_transcript(path)
    assert transcript.document is None and transcript.bad == []
    assert (
        transcript.refused is not None and "is not named <session id>.jsonl" in transcript.refused
    )


def test_only_jsonl_files_directly_in_the_folder_are_transcripts(tmp_path: Path) -> None:
    (tmp_path / "20250101_000000_abcdef.jsonl").write_text("")
    (tmp_path / "session_20250101_000000_abcdef.json").write_text("{}")  # Hermes' full dumps
    (tmp_path / "sessions.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "20250101_000000_bbbbbb.jsonl").write_text("")
    (tmp_path / "dir.jsonl").mkdir()
    assert [p.name for p in transcript_files(tmp_path)] == ["20250101_000000_abcdef.jsonl"]


def test_a_file_with_no_message_gives_nothing_to_import(tmp_path: Path) -> None:
    path = tmp_path / "20250101_000000_abcdef.jsonl"
    path.write_text('{"role": "session_meta", "tools": [], "model": "m"}\n\n')
    transcript = read_transcript(path, UTC)
    assert transcript.document is None and transcript.bad == [] and transcript.refused is None
