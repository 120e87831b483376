"""`hermes sessions list | delete | rename | stats` and errors, in-process and as a script."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import pytest

from shared.db import SessionNotFound, Store, TitleInUse
from shared.settings import Settings
from shared.store.sessions import get_session
from shared.titles import TitleError, TitleSource
from tests.integration.test_cli_sessions_support import (
    DAY,
    NOW,
    Msg,
    Seed,
    hermes,
    invoke,
    message_total,
    seed,
    session_ids,
)

pytestmark = pytest.mark.both_databases

# --- list ---


def header(output: str) -> list[str]:
    return output.splitlines()[0].split("  ")


def columns(output: str) -> list[str]:
    return [name.strip() for name in header(output) if name.strip()]


def test_list_on_an_empty_store_says_so(settings: Settings, store: Store) -> None:
    result = invoke(settings, ["sessions", "list"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "No sessions yet."


def test_list_without_titles_shows_the_source_column(settings: Settings, store: Store) -> None:
    seed(
        store,
        Seed("20250615_100000_aaaaaa", messages=[Msg("user", "how do I bake bread")]),
        Seed("20250615_110000_bbbbbbbb", source="telegram", started=NOW - 600),
    )
    result = invoke(settings, ["sessions", "list"])
    assert result.exit_code == 0, result.output
    assert columns(result.output) == ["Preview", "Last Active", "Src", "ID"]
    lines = result.output.splitlines()
    assert "20250615_110000_bbbbbbbb" in lines[1] and "telegram" in lines[1]
    assert "how do I bake bread" in lines[2] and "cli" in lines[2]


def test_list_with_a_title_shows_the_title_column_and_a_dash(
    settings: Settings, store: Store
) -> None:
    seed(
        store,
        Seed("20250615_100000_aaaaaa", title="Bread 🍞 recipes", started=NOW - 7200),
        Seed("20250615_110000_bbbbbb", messages=[Msg("user", "untitled one")]),
    )
    result = invoke(settings, ["sessions", "list"])
    assert columns(result.output) == ["Title", "Preview", "Last Active", "ID"]
    untitled, titled = result.output.splitlines()[1:3]
    assert untitled.startswith("—") and "untitled one" in untitled
    assert titled.startswith("Bread 🍞 recipes")
    assert "Src" not in result.output


def test_list_switches_columns_on_the_rows_shown_only(settings: Settings, store: Store) -> None:
    seed(
        store,
        Seed("20250601_000000_aaaaaa", title="old and titled", started=NOW - 10 * DAY),
        Seed("20250615_000000_bbbbbb", started=NOW - 60),
    )
    assert columns(invoke(settings, ["sessions", "list", "--limit", "1"]).output)[0] == "Preview"
    assert columns(invoke(settings, ["sessions", "list", "--limit", "2"]).output)[0] == "Title"


def test_list_relative_times_follow_the_clock(settings: Settings, store: Store) -> None:
    # Each session's last activity is its last message: started + number of messages.
    ages = {
        "a": 30,
        "b": 5 * 60 + 10,
        "c": 3 * 3600 + 100,
        "d": 30 * 3600,
        "e": 3 * DAY + 100,
        "f": 10 * DAY,
    }
    seed(
        store,
        *(
            Seed(f"20250101_00000{i}_{k * 6}", started=NOW - age - 1)
            for i, (k, age) in enumerate(ages.items())
        ),
    )
    result = invoke(settings, ["sessions", "list"])
    rows = result.output.splitlines()[1:]
    old_date = datetime.fromtimestamp(NOW - 10 * DAY).strftime("%Y-%m-%d")
    expected = ["just now", "5m ago", "3h ago", "yesterday", "3d ago", old_date]
    for row, when in zip(rows, expected, strict=True):
        assert f"  {when}  " in row, (row, when)
    # newest activity first
    assert [row.split()[-1][-1] for row in rows] == list("abcdef")


def test_list_footer_when_more_rows_exist_and_source_filter(
    settings: Settings, store: Store
) -> None:
    seed(
        store,
        *(Seed(f"20250615_0000{i:02d}_aaaaaa", started=NOW - 1000 + i) for i in range(22)),
        *(
            Seed(f"20250615_0100{i:02d}_bbbbbb", source="slack", started=NOW - 5000)
            for i in range(3)
        ),
    )
    result = invoke(settings, ["sessions", "list"])
    lines = result.output.splitlines()
    assert len(lines) == 1 + 20 + 1
    assert lines[-1] == "Showing 20 of 25 sessions; use --limit to see more."
    everything = invoke(settings, ["sessions", "list", "--limit", "25"]).output.splitlines()
    assert len(everything) == 26 and "Showing" not in everything[-1]
    slack = invoke(settings, ["sessions", "list", "--source", "slack"]).output.splitlines()
    assert len(slack) == 4 and all("slack" in line for line in slack[1:])
    none = invoke(settings, ["sessions", "list", "--source", "discord"])
    assert none.exit_code == 0 and "No sessions from discord yet." in none.output


def test_list_through_the_script_is_plain_text_with_headers(
    hermes_env: dict[str, str], store: Store
) -> None:
    seed(store, Seed("20250615_100000_cafe01", title="我的项目", messages=[Msg("user", "你好")]))
    done = hermes(hermes_env, "sessions", "list")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].split() == ["Title", "Preview", "Last", "Active", "ID"]
    assert "我的项目" in done.stdout and "20250615_100000_cafe01" in done.stdout
    assert "\x1b[" not in done.stdout  # no terminal codes into a pipe


# --- delete ---


@pytest.fixture
def two(store: Store) -> Store:
    seed(
        store,
        Seed(
            "20250615_100000_aaaaaa",
            title="keep me",
            messages=[Msg("user", "a"), Msg("assistant", "b")],
        ),
        Seed(
            "20250615_110000_bbbbbb",
            title="Delete Me",
            parent="20250615_100000_aaaaaa",
            messages=[Msg("user", "c"), Msg("assistant", "d"), Msg("user", "e")],
        ),
    )
    return store


def test_delete_asks_and_yes_deletes(settings: Settings, two: Store) -> None:
    result = invoke(settings, ["sessions", "delete", "20250615_11"], input="y\n")
    assert 'Delete session 20250615_110000_bbbbbb ("Delete Me", 3 messages)? [y/N]' in result.output
    assert result.exit_code == 0, result.output
    assert session_ids(two) == ["20250615_100000_aaaaaa"]
    assert message_total(two) == 2


@pytest.mark.parametrize("answer", ["n\n", "\n", "no\n", "yep\n", "Y es\n"])
def test_delete_anything_but_yes_changes_nothing(
    settings: Settings, two: Store, answer: str
) -> None:
    result = invoke(settings, ["sessions", "delete", "Delete Me"], input=answer)
    assert result.exit_code == 1
    assert "nothing deleted" in result.output
    assert len(session_ids(two)) == 2 and message_total(two) == 5


def test_delete_with_yes_does_not_ask_and_keeps_continuations(
    settings: Settings, two: Store
) -> None:
    result = invoke(settings, ["sessions", "delete", "keep me", "--yes"])
    assert result.exit_code == 0, result.output
    assert "[y/N]" not in result.output
    assert "Deleted session 20250615_100000_aaaaaa (2 messages)." in result.output
    with two.read() as conn:
        child = get_session(conn, "20250615_110000_bbbbbb")
    assert child is not None and child.parent_session_id is None


def test_delete_accepts_a_typed_yes(settings: Settings, two: Store) -> None:
    assert invoke(settings, ["sessions", "delete", "Delete Me"], input="YES\n").exit_code == 0
    assert session_ids(two) == ["20250615_100000_aaaaaa"]


def test_delete_unknown_and_ambiguous(settings: Settings, two: Store) -> None:
    result = invoke(settings, ["sessions", "delete", "nope", "--yes"])
    assert result.exit_code == 1 and isinstance(result.exception, SessionNotFound)
    result = invoke(settings, ["sessions", "delete", "2025", "--yes"])
    assert result.exit_code == 1
    assert len(session_ids(two)) == 2


def test_delete_unknown_through_the_script(hermes_env: dict[str, str], two: Store) -> None:
    done = hermes(hermes_env, "sessions", "delete", "x", "--yes")
    assert done.returncode == 1
    assert done.stderr == "Session 'x' not found.\n"
    assert len(session_ids(two)) == 2


def test_delete_without_an_answer_aborts(hermes_env: dict[str, str], two: Store) -> None:
    done = hermes(hermes_env, "sessions", "delete", "Delete Me")  # stdin is /dev/null
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert len(session_ids(two)) == 2


# --- rename ---


def test_rename_joins_words_and_sets_user_provenance(settings: Settings, store: Store) -> None:
    seed(store, Seed("20250615_100000_aaaaaa", title="auto name", title_source=TitleSource.AUTO))
    result = invoke(settings, ["sessions", "rename", "20250615_10", "my", "big", "project"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == 'Renamed 20250615_100000_aaaaaa to "my big project".'
    with store.read() as conn:
        record = get_session(conn, "20250615_100000_aaaaaa")
    assert record is not None
    assert (record.title, record.title_source) == ("my big project", "user")


def test_rename_cleans_the_title(settings: Settings, store: Store) -> None:
    seed(store, Seed("20250615_100000_aaaaaa"))
    invoke(settings, ["sessions", "rename", "20250615_100000_aaaaaa", "日本語\u200b", " title\t2"])
    with store.read() as conn:
        record = get_session(conn, "20250615_100000_aaaaaa")
    assert record is not None and record.title == "日本語 title 2"


def test_rename_needs_a_title(settings: Settings, store: Store) -> None:
    seed(store, Seed("20250615_100000_aaaaaa"))
    assert invoke(settings, ["sessions", "rename", "20250615_100000_aaaaaa"]).exit_code == 2


def test_rename_to_a_title_in_use_or_too_long_changes_nothing(
    settings: Settings, hermes_env: dict[str, str], two: Store
) -> None:
    result = invoke(settings, ["sessions", "rename", "keep me", "Delete", "Me"])
    assert result.exit_code == 1 and isinstance(result.exception, TitleInUse)
    result = invoke(settings, ["sessions", "rename", "keep me", "x" * 101])
    assert result.exit_code == 1 and isinstance(result.exception, TitleError)

    done = hermes(hermes_env, "sessions", "rename", "keep me", "Delete", "Me")
    assert done.returncode == 1
    assert done.stderr == ("Title 'Delete Me' is already used by session 20250615_110000_bbbbbb.\n")
    done = hermes(hermes_env, "sessions", "rename", "keep me", "y" * 60, "z" * 60)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "limit is 100" in done.stderr
    with two.read() as conn:
        record = get_session(conn, "20250615_100000_aaaaaa")
    assert record is not None and record.title == "keep me"


# --- stats ---


def test_stats_per_source_and_database_size(settings: Settings, store: Store) -> None:
    seed(
        store,
        Seed("20250615_100000_aaaaaa", messages=[Msg("user", "a"), Msg("assistant", "b")]),
        Seed("20250615_100001_aaaaaa", messages=[Msg("user", "c")]),
        Seed(
            "20250615_100002_aaaaaaaa",
            source="telegram",
            messages=[Msg("user", "x"), Msg("assistant", "y"), Msg("user", "z")],
        ),
    )
    result = invoke(settings, ["sessions", "stats"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[:4] == [  # the guide's lines
        "Total sessions: 3",
        "Total messages: 6",
        "  cli: 2 sessions",
        "  telegram: 1 session",
    ]
    size = re.fullmatch(r"Database size: (\d+\.\d) (KB|MB) \((.*)\)", lines[4])
    assert size is not None, lines[4]
    if store.dialect == "sqlite":
        assert "WAL" in size.group(3) and str(settings.state_db_path) in size.group(3)
    else:
        assert re.fullmatch(r"schema \S+ on the PostgreSQL server", size.group(3)), lines[4]
    assert len(lines) == 5


def test_stats_counts_past_a_thousand_as_the_guide_prints_them(
    settings: Settings, store: Store
) -> None:
    seed(store, *(Seed(f"20250615_1{i:05d}_aaaaaa") for i in range(1001)))
    lines = invoke(settings, ["sessions", "stats"]).output.splitlines()
    assert lines[:3] == ["Total sessions: 1001", "Total messages: 1001", "  cli: 1001 sessions"]


def test_stats_on_an_empty_store(hermes_env: dict[str, str]) -> None:
    done = hermes(hermes_env, "sessions", "stats")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Total sessions: 0\nTotal messages: 0\nDatabase size: ")


# --- a broken environment: one line, exit 2, nothing changed ---


@pytest.mark.parametrize(
    "content",
    [b"this is not a database at all\n", b"SQLite format 3\x00" + b"\x07" * 4000],
    ids=["garbage", "corrupt"],
)
@pytest.mark.parametrize(
    "args",
    [["list"], ["export", "-"], ["prune", "--yes"]],
    ids=lambda a: a[0],
)
def test_a_corrupt_state_db_is_one_line_and_exit_2(
    hermes_env: dict[str, str], hermes_home: Path, content: bytes, args: list[str]
) -> None:
    if "HERMES_DATABASE_URL" in hermes_env:
        pytest.skip("a damaged state.db file is SQLite's; PostgreSQL reads no file")
    db = hermes_home / "state.db"
    db.write_bytes(content)
    done = hermes(hermes_env, "sessions", *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert str(db) in done.stderr
    assert db.read_bytes() == content


def test_an_unusable_hermes_home_is_one_line_and_exit_2(
    hermes_env: dict[str, str], tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    env = {**hermes_env, "HERMES_HOME": str(blocker / "home")}
    done = hermes(env, "sessions", "list")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert blocker.read_text() == "not a directory"


def test_list_limit_has_help(settings: Settings) -> None:
    result = invoke(settings, ["sessions", "list", "--help"])
    assert result.exit_code == 0
    option = result.output[result.output.index("--limit") :]
    assert "Show at most this many sessions" in " ".join(option.split())
