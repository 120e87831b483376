"""`hermes sessions import-legacy`: an older Hermes' `sessions/*.jsonl` into state.db, verified
by message count, files kept unless --delete-imported; and the chat's one-time mention."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from shared.db import Store, open_store
from shared.settings import load_settings
from shared.store.messages import transcript
from shared.store.sessions import get_session
from tests.integration.test_cli_sessions_support import hermes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "legacy"
GATEWAY = "20250314_091502_4077bccc"
TERMINAL = "20250315_120000_a1b2c3"
DAMAGED = "20250316_080000_5ee5ee55"


@pytest.fixture
def legacy(hermes_home: Path) -> Path:
    folder = hermes_home / "sessions"
    folder.mkdir()
    for path in FIXTURES.glob("*.jsonl"):
        shutil.copy(path, folder / path.name)
    return folder


@pytest.fixture
def env(hermes_env: dict[str, str]) -> dict[str, str]:
    return {**hermes_env, "TZ": "UTC"}


def _store(env: dict[str, str]) -> Store:
    return open_store(load_settings(env).resolved_database_url)


def test_import_verifies_lists_what_is_safe_and_deletes_nothing(
    env: dict[str, str], legacy: Path
) -> None:
    result = hermes(env, "sessions", "import-legacy")
    assert result.returncode == 1, result.stdout + result.stderr  # bad lines and a refused file
    out, err = result.stdout, result.stderr
    assert f"  {GATEWAY}.jsonl: imported, 6 messages (verified)" in out
    assert f"  {TERMINAL}.jsonl: imported, 4 messages (verified)" in out
    assert f"  {DAMAGED}.jsonl: imported, 3 messages (verified)" in out
    assert "  notes.jsonl: refused: 'notes.jsonl' is not named <session id>.jsonl" in out
    assert f"{legacy / DAMAGED}.jsonl:3: invalid JSON: Expecting ',' delimiter" in err
    assert f"{legacy / DAMAGED}.jsonl:5: unknown role 'function'" in err
    assert f"{legacy / DAMAGED}.jsonl:8: timestamp 'yesterday' is not ISO 8601" in err
    assert f"{DAMAGED}.jsonl: 5 lines could not be imported; the file is kept" in err
    assert "Imported 3 sessions (13 messages)." in out
    safe = out.split("Safe to delete (every message is in state.db):\n", 1)[1]
    listed = [line.strip() for line in safe.splitlines() if line.startswith("  ")]
    assert listed == [f"{legacy / GATEWAY}.jsonl", f"{legacy / TERMINAL}.jsonl"]
    assert sorted(p.name for p in legacy.iterdir()) == sorted(
        p.name for p in FIXTURES.glob("*.jsonl")
    )

    store = _store(env)
    try:
        with store.read() as conn:
            gateway = get_session(conn, GATEWAY)
            assert gateway is not None and gateway.source == "telegram"
            assert gateway.ended_at is not None and gateway.model == "anthropic/claude-sonnet-4"
            rows = transcript(conn, GATEWAY)
            assert [m.role for m in rows] == [
                "user",
                "assistant",
                "tool",
                "assistant",
                "user",
                "assistant",
            ]
            assert rows[1].tool_calls is not None and "call_001" in rows[1].tool_calls
            assert rows[2].tool_call_id == "call_001" and rows[2].tool_name == "terminal"
            assert rows[4].content == "And this graph?\n[image]"
            terminal = get_session(conn, TERMINAL)
            assert terminal is not None and terminal.source == "cli"
            assert [m.content for m in transcript(conn, DAMAGED)] == [
                "first question",
                "first answer, written again",
                "third question",
            ]
    finally:
        store.close()


def test_a_second_run_imports_nothing_twice_and_delete_imported_removes_only_verified_files(
    env: dict[str, str], legacy: Path
) -> None:
    hermes(env, "sessions", "import-legacy")
    again = hermes(env, "sessions", "import-legacy", str(legacy), "--delete-imported")
    assert f"  {GATEWAY}.jsonl: already in state.db, 6 messages (verified)" in again.stdout
    assert "Imported 0 sessions (0 messages)." in again.stdout
    assert "Deleted 2 files (verified in state.db)." in again.stdout
    assert again.returncode == 1  # the damaged file and notes.jsonl are still there, and said so
    assert sorted(p.name for p in legacy.iterdir()) == [f"{DAMAGED}.jsonl", "notes.jsonl"]
    store = _store(env)
    try:
        with store.read() as conn:
            assert len(transcript(conn, GATEWAY)) == 6  # not imported twice
    finally:
        store.close()


def test_a_session_already_in_state_db_with_other_messages_is_not_safe_to_delete(
    env: dict[str, str], legacy: Path
) -> None:
    hermes(env, "sessions", "import-legacy")
    with (legacy / f"{GATEWAY}.jsonl").open("a") as handle:  # the old Hermes wrote more since
        handle.write(
            '{"role": "user", "content": "one more", "timestamp": "2025-03-15T00:00:00"}\n'
        )
    again = hermes(env, "sessions", "import-legacy", "--delete-imported")
    assert (
        f"  {GATEWAY}.jsonl: already in state.db, but state.db holds 6 messages for it and "
        "the file 7 messages: kept"
    ) in again.stdout
    assert again.returncode == 1
    assert (legacy / f"{GATEWAY}.jsonl").exists()


def test_a_clean_folder_exits_zero_and_bad_arguments_change_nothing(
    env: dict[str, str], hermes_home: Path, tmp_path: Path
) -> None:
    absent = hermes(env, "sessions", "import-legacy")
    assert absent.returncode == 0 and "does not exist" in absent.stdout
    clean = tmp_path / "clean"
    clean.mkdir()
    shutil.copy(FIXTURES / f"{TERMINAL}.jsonl", clean)
    done = hermes(env, "sessions", "import-legacy", str(clean))
    assert done.returncode == 0, done.stdout + done.stderr
    missing = hermes(env, "sessions", "import-legacy", str(tmp_path / "nope"))
    assert missing.returncode == 1 and missing.stdout == ""
    assert (
        missing.stderr == f"hermes sessions import-legacy: {tmp_path / 'nope'} is not a directory\n"
    )


def test_a_chat_mentions_legacy_transcripts_once(env: dict[str, str], legacy: Path) -> None:
    first = hermes(env, "chat", "-q", "hi")
    assert first.returncode == 0, first.stderr
    notes = [line for line in first.stderr.splitlines() if "from an older Hermes" in line]
    assert len(notes) == 1 and "hermes sessions import-legacy" in first.stderr
    assert "3 transcripts" in notes[0]  # notes.jsonl is no transcript
    second = hermes(env, "chat", "-q", "hi again")
    assert second.returncode == 0 and "older Hermes" not in second.stderr
    newer = legacy / "20260101_000000_cafe01.jsonl"
    newer.write_text('{"role": "user", "content": "new", "timestamp": "2026-01-01T00:00:00"}\n')
    third = hermes(env, "chat", "-q", "and again")
    assert "4 transcripts" in third.stderr  # a newer file: mentioned again
    hermes(env, "sessions", "import-legacy")
    newest = legacy / "20260102_000000_cafe02.jsonl"
    newest.write_text('{"role": "user", "content": "new", "timestamp": "2026-01-02T00:00:00"}\n')
    fourth = hermes(env, "chat", "-q", "last")
    assert "holds 1 transcript from" in fourth.stderr  # only what state.db does not have
