"""`hermes sessions browse`: refuses without a terminal; filters, moves and resumes under a pty.

Also the progress bars, which only a terminal sees.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from io import StringIO
from pathlib import Path

import pytest

from producers.cli.browse import Selection, entries, matching
from shared.db import Store
from shared.settings import Settings
from shared.store.session_listing import list_sessions
from tests.integration.test_cli_sessions_support import (
    HERMES,
    NOW,
    Msg,
    Seed,
    elsewhere,
    hermes,
    invoke,
    seed,
)

pytestmark = pytest.mark.both_databases

pexpect = pytest.importorskip("pexpect")

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|[\x08\r]")

NEWEST = "20250615_120000_c0ffee"
MIDDLE = "20250615_110000_beef0000"
OLDEST = "20250615_100000_facade"


@pytest.fixture
def three(store: Store) -> Store:
    seed(
        store,
        Seed(
            OLDEST,
            title="Kyoto trip plan",
            started=NOW - 7200,
            messages=[Msg("user", "temples to visit")],
        ),
        Seed(
            MIDDLE,
            source="telegram",
            started=NOW - 3600,
            messages=[Msg("user", "Sourdough starter is flat")],
        ),
        Seed(
            NEWEST,
            title="weekly report",
            started=NOW - 60,
            messages=[Msg("user", "summarise my week")],
        ),
    )
    return store


def test_browse_refuses_without_a_terminal(settings: Settings, three: Store) -> None:
    result = invoke(settings, ["sessions", "browse"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "interactive terminal" in result.output


def test_browse_through_the_script_refuses_with_one_line(
    hermes_env: dict[str, str], three: Store
) -> None:
    done = hermes(hermes_env, "sessions", "browse")  # stdin is /dev/null
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        "hermes sessions browse needs an interactive terminal; use `hermes sessions list`.\n"
    )


def test_filter_matches_every_word_in_title_preview_or_id(three: Store) -> None:
    with three.read() as conn:
        rows = list_sessions(conn)[0]
    found = entries(rows, NOW)
    assert [e.session_id for e in found] == [NEWEST, MIDDLE, OLDEST]
    assert [e.session_id for e in matching(found, "")] == [NEWEST, MIDDLE, OLDEST]
    assert [e.session_id for e in matching(found, "KYOTO")] == [OLDEST]
    assert [e.session_id for e in matching(found, "sourdough flat")] == [MIDDLE]
    assert [e.session_id for e in matching(found, "c0ff")] == [NEWEST]
    assert matching(found, "kyoto flat") == []
    assert found[0].label == "weekly report · summarise my week"
    assert found[1].label == "Sourdough starter is flat"


def test_selection_moves_within_bounds_and_resets_on_filter(three: Store) -> None:
    with three.read() as conn:
        selection = Selection(entries(list_sessions(conn)[0], NOW))
    selection.move(-1)
    assert selection.current is not None and selection.current.session_id == NEWEST
    selection.move(10)
    assert selection.current is not None and selection.current.session_id == OLDEST
    selection.refilter("week")
    assert selection.index == 0 and selection.current is not None
    assert selection.current.session_id == NEWEST
    selection.refilter("nothing like this")
    selection.move(1)
    assert selection.current is None


def spawn(env: dict[str, str], *args: str) -> pexpect.spawn:
    env = {**env, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1", "NO_COLOR": "1"}
    return pexpect.spawn(
        str(HERMES), list(args), env=env, encoding="utf-8", timeout=30, dimensions=(30, 140)
    )


def finish(child: pexpect.spawn) -> tuple[str, int]:
    child.expect(pexpect.EOF)
    child.close()
    return str(child.before), int(child.exitstatus)


def captured(env: dict[str, str], *args: str) -> pexpect.spawn:
    """`hermes ARGS` with stdout captured by the shell (`$(...)`), the picker on the pty."""
    env = {**env, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1", "NO_COLOR": "1"}
    command = " ".join([shlex.quote(str(HERMES)), *map(shlex.quote, args)])
    script = f'out=$({command}); code=$?; echo "captured: $out"; exit $code'
    return pexpect.spawn(
        "/bin/sh", ["-c", script], env=env, encoding="utf-8", timeout=30, dimensions=(30, 140)
    )


def test_browse_type_to_filter_then_enter_prints_the_resume_line(
    hermes_env: dict[str, str], three: Store
) -> None:
    child = captured(hermes_env, "sessions", "browse")
    child.expect("Esc quit")
    # Keys are handled in order: the filter has applied by the time Enter is read.
    child.send("sourdough")
    child.send("\r")
    child.expect(r"captured: hermes --resume (\S+)\r\n")
    assert child.match.group(1) == MIDDLE
    _rest, status = finish(child)
    assert status == 0


def test_browse_arrow_keys_move_the_selection(hermes_env: dict[str, str], three: Store) -> None:
    child = captured(hermes_env, "sessions", "browse")
    child.expect("Esc quit")
    child.send("\x1b[B")  # down
    child.send("\x1b[B")  # down
    child.send("\r")
    child.expect(r"captured: hermes --resume (\S+)\r\n")
    assert child.match.group(1) == OLDEST
    assert finish(child)[1] == 0


def test_browse_on_a_terminal_resumes_the_chat(
    hermes_env: dict[str, str], hermes_home: Path, three: Store
) -> None:
    child = spawn({**hermes_env, "TERM": "xterm-256color"}, "sessions", "browse")
    child.logfile_read = log = StringIO()
    try:
        child.expect("Esc quit")
        child.send("kyoto")
        child.send("\r")
        child.expect("Type a message", timeout=60)
        child.expect("●")
        child.sendcontrol("d")
        _rest, status = finish(child)
    finally:
        if child.isalive():
            child.close(force=True)
        _stop_leftover_stack(hermes_home)
    shown = ANSI.sub("", log.getvalue())
    assert status == 0, shown
    assert "hermes --resume" not in shown  # it ran the chat instead of printing the command
    assert OLDEST in shown and "temples to visit" in shown  # the resumed session's recap


def _stop_leftover_stack(hermes_home: Path) -> None:
    record = hermes_home / "run" / "chat-stack.json"
    leftover = json.loads(record.read_text()) if record.exists() else None
    if leftover:  # a failed test must not leave the processes it started
        for pid in (leftover.get("worker"), leftover.get("redis")):
            subprocess.run(["kill", str(pid)], check=False, capture_output=True)
    assert leftover is None, "the chat left its embedded stack running"


def test_browse_escape_quits_without_a_resume_line(
    hermes_env: dict[str, str], three: Store
) -> None:
    child = spawn(hermes_env, "sessions", "browse")
    child.expect("Esc quit")
    child.send("\x1b")
    rest, status = finish(child)
    assert status == 1
    assert "hermes --resume" not in rest


def test_progress_bars_show_on_a_terminal(
    hermes_env: dict[str, str], three: Store, tmp_path: Path
) -> None:
    out = tmp_path / "x.jsonl"
    child = spawn(hermes_env, "sessions", "export", str(out))
    rest, status = finish(child)
    assert status == 0
    assert "Exporting" in rest and "Exported 3 sessions (3 messages)" in rest
    child = spawn(elsewhere(hermes_env, tmp_path / "b"), "sessions", "import", str(out))
    rest, status = finish(child)
    assert status == 0
    assert "Importing" in rest and "Imported 3 sessions (3 messages)" in rest
