"""The real `hermes` console script in a pty (pexpect): chat, exit, -c, -r PREFIX, the recap
panel, /title, -q — on a fresh HERMES_HOME with nothing running and nothing configured."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pexpect
import pytest
from sqlalchemy import select

from shared.db import open_store
from shared.db.schema import inbox as inbox_table
from shared.model import SessionRecord
from shared.settings import load_settings
from shared.store import messages, session_listing
from shared.store import sessions as session_rows
from tests.integration.terminal_kit import (
    PROMPT,
    SESSION_ID,
    Terminal,
    hermes_bin,
    run,
    start,
    term_env,
    terminals,
)

__all__ = ["term_env", "terminals"]  # fixtures


def test_fresh_machine_chat_exit_prints_the_id_and_continue_shows_the_recap(
    terminals: list[Terminal], term_env: dict[str, str], hermes_home: Path
) -> None:
    first = start(terminals, term_env).ready()
    first.say("hello from the terminal", expect="only echo: hello from the terminal")
    out = first.leave()
    assert "Starting a local worker…" in out and "Stopped the local worker." in out
    assert "Broker pid" not in out and "worker pid" not in out
    header = out.splitlines()[0]
    assert "offline model" in header and "config.yaml" in header and len(header) < 100
    (session_id,) = SESSION_ID.findall(out)
    assert f"Resume it with: hermes -r {session_id}" in out

    again = start(terminals, term_env, "-c").ready()
    again.say("and a second message", expect="only echo: and a second message")
    out = again.leave()
    assert f"Resumed {session_id}" in out or f"· {session_id}" in out
    assert "● hello from the terminal" in out
    assert "◆ [offline model] I am the offline model" in out
    assert SESSION_ID.findall(out) == [session_id]
    store = open_store(load_settings(term_env).resolved_database_url)
    try:
        with store.read() as conn:
            said = [m.content for m in messages.transcript(conn, session_id) if m.role == "user"]
    finally:
        store.close()
    assert said == ["hello from the terminal", "and a second message"]


def _seed(env: dict[str, str]) -> str:
    """A terminal session with 12 exchanges, tool calls, long and multi-line texts."""
    store = open_store(load_settings(env).resolved_database_url)
    session_id = "20250101_120000_abc123"
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": "{}"}}
        for i, name in enumerate(["terminal", "web_search", "terminal"])
    ]
    try:
        with store.write() as conn:
            session_rows.create_session(conn, session_id=session_id, source="cli", now=1.0)
            add = messages.append_message
            add(conn, session_id, "system", "SECRET SYSTEM NOTE", now=1.0)
            for n in range(11):
                add(conn, session_id, "user", f"question {n}", now=2.0 + n)
                add(
                    conn,
                    session_id,
                    "assistant",
                    "\n".join(f"a{n} line {i}" for i in range(5)),
                    now=2.0 + n,
                )
            add(conn, session_id, "user", "x" * 400, now=20.0)
            add(conn, session_id, "assistant", None, tool_calls=calls, now=20.0)
            add(conn, session_id, "tool", "TOOL OUTPUT 42", tool_call_id="c0", now=20.0)
            add(
                conn,
                session_id,
                "assistant",
                "\n".join(f"final line {i}" for i in range(5)),
                now=21.0,
            )
    finally:
        store.close()
    return session_id


def test_resume_by_prefix_shows_the_recap_panel_by_its_rules(
    terminals: list[Terminal], term_env: dict[str, str]
) -> None:
    session_id = _seed(term_env)
    resumed = start(terminals, term_env, "-r", session_id[:18]).ready()
    resumed.say("back again", expect="only echo: back again")
    out = resumed.leave()
    panel = [line.strip("│ ").rstrip() for line in out.splitlines() if line.startswith("│")]
    assert any(f"Resumed {session_id}" in line for line in out.splitlines())
    assert panel[0] == "... 4 earlier messages ..."
    assert "● question 2" in panel and "● question 1" not in panel
    assert panel[panel.index("● question 2") + 1 : panel.index("● question 2") + 4] == [
        "◆ a2 line 0",
        "a2 line 1",
        "a2 line 2…",
    ]
    assert "●" + "x" * 300 + "…" in "".join(panel).replace(" ", "")  # wrapped to the panel
    assert "[3 tool calls: terminal, web_search]" in panel
    assert panel[-5:] == [
        "◆ final line 0",
        "final line 1",
        "final line 2",
        "final line 3",
        "final line 4",
    ]
    assert "SECRET SYSTEM NOTE" not in out and "TOOL OUTPUT 42" not in out
    assert SESSION_ID.findall(out) == [session_id]  # the reply went into the resumed session


def test_title_before_the_first_message_and_continue_by_name(
    terminals: list[Terminal], term_env: dict[str, str]
) -> None:
    chat = start(terminals, term_env).ready()
    chat.say("/title", expect="no title yet")
    chat.say("/title Plans for May", expect="Title set to 'Plans for May'.")
    chat.say("let's plan", expect="only echo: let's plan")
    chat.say("/title", expect="This session is titled 'Plans for May'.")
    chat.say("/frobnicate", expect="Unknown command /frobnicate. Send /help for the list.")
    out = chat.leave()
    assert "Resume it with: hermes -r" in out and 'or: hermes -c "Plans for May"' in out
    (session_id,) = SESSION_ID.findall(out)

    minimal = {**term_env, "HERMES_DISPLAY__RESUME_DISPLAY": "minimal"}
    named = start(terminals, minimal, "-c", "Plans for May").ready()
    out = named.leave()
    assert f'Resumed session {session_id} "Plans for May" — 2 messages.' in out
    store = open_store(load_settings(term_env).resolved_database_url)
    try:
        with store.read() as conn:
            session = session_rows.require_session(conn, session_id)
    finally:
        store.close()
    assert (session.title, session.title_source) == ("Plans for May", "user")


def test_one_shot_prints_only_the_reply_and_continues_with_c(
    term_env: dict[str, str], hermes_home: Path
) -> None:
    first = run(term_env, "chat", "-q", "ping")
    assert first.returncode == 0, first.stderr
    assert first.stdout == (
        "[offline model] I am the offline model (no model endpoint is configured), "
        "so I can only echo: ping\n"
    )
    session_id = re.findall(r"session (\d{8}_\d{6}_[0-9a-f]{6})", first.stderr)[0]
    second = run(term_env, "chat", "-q", "pong", "-c")
    assert second.returncode == 0 and second.stdout.endswith("echo: pong\n")
    assert f"session {session_id}" in second.stderr
    assert not (hermes_home / "run" / "chat-stack.json").exists()


def test_a_folder_named_like_our_packages_where_hermes_runs_changes_nothing(
    term_env: dict[str, str], tmp_path: Path
) -> None:
    """The worker the chat starts must import our code, not ./shared or ./workers of the
    directory the user happens to be in."""
    project = tmp_path / "someones-project"
    for name in ("shared", "workers", "producers"):
        (project / name).mkdir(parents=True)
        (project / name / "__init__.py").write_text("raise ImportError('decoy imported')\n")
    result = subprocess.run(
        [hermes_bin(), "chat", "-q", "decoy check"],
        env=term_env,
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith("echo: decoy check\n")


def _run_with(env: dict[str, str], stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [hermes_bin(), *args], env=env, input=stdin, capture_output=True, text=True, timeout=120
    )


def test_one_shot_gets_its_title_and_command_only_chats_are_not_continued(
    term_env: dict[str, str], hermes_home: Path
) -> None:
    first = run(term_env, "chat", "-q", "I want to plan a trip to Lisbon in May")
    assert first.returncode == 0, first.stderr
    session_id = re.findall(r"session (\d{8}_\d{6}_[0-9a-f]{6})", first.stderr)[0]
    store = open_store(load_settings(term_env).resolved_database_url)
    try:
        with store.read() as conn:  # titled before the chat stopped its own worker
            titled = session_rows.require_session(conn, session_id)
        assert (titled.title, titled.title_source) == ("I want to plan a trip to", "auto")

        commands = _run_with(term_env, "/help\n")
        assert commands.returncode == 0, commands.stderr
        assert "/handoff <platform>" in commands.stdout and "/sethome" in commands.stdout
        assert "/attach PATH" in commands.stdout and "/exit" in commands.stdout
        assert "No messages were sent, so nothing was saved." in commands.stdout
        assert "saved." not in commands.stdout.replace("nothing was saved.", "")
        assert "Resume it with" not in commands.stdout
        with store.read() as conn:
            listed, _ = session_listing.list_sessions(conn)
        assert all(row.record.message_count for row in listed)  # the empty one is gone
    finally:
        store.close()

    again = _run_with(term_env, "", "-c")
    assert again.returncode == 0, again.stderr
    assert f"· {session_id}" in again.stdout and "● I want to plan a trip" in again.stdout
    assert "(no messages yet)" not in again.stdout


class _Titling:
    """A terminal whose session gets its title `after` seconds from now (never if None)."""

    def __init__(self, after: float | None) -> None:
        self.clock = time.time
        self.titled_at = None if after is None else time.monotonic() + after

    def session(self) -> SessionRecord:
        titled = self.titled_at is not None and time.monotonic() >= self.titled_at
        return SessionRecord(
            "s", "cli", 0.0, self.clock(), title="t" if titled else None, message_count=2
        )


def test_leaving_a_chat_owned_stack_waits_briefly_for_a_fresh_title() -> None:
    from producers.cli.chat import TITLE_WAIT_SECONDS, _let_the_title_land

    started = time.monotonic()
    _let_the_title_land(_Titling(after=0.5))  # type: ignore[arg-type]
    assert 0.5 <= time.monotonic() - started < TITLE_WAIT_SECONDS
    started = time.monotonic()
    _let_the_title_land(_Titling(after=None))  # type: ignore[arg-type]
    assert TITLE_WAIT_SECONDS <= time.monotonic() - started < TITLE_WAIT_SECONDS + 1


def test_bad_references_are_one_line_errors(term_env: dict[str, str]) -> None:
    missing = run(term_env, "-r", "nope")
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
    assert "nope" in missing.stderr
    nothing = run(term_env, "-c")
    assert nothing.returncode == 1 and "No earlier terminal session" in nothing.stderr
    both = run(term_env, "chat", "-c", "-r", "x")
    assert both.returncode == 2 and "not both" in both.stderr


def test_ctrl_c_during_a_reply_sends_stop(
    terminals: list[Terminal], term_env: dict[str, str]
) -> None:
    slow = {**term_env, "HERMES_MODEL__OFFLINE_LATENCY_MS": "60000"}
    chat = start(terminals, slow).ready()
    chat.child.sendline("take your time")
    chat.child.expect("thinking")
    store = open_store(load_settings(slow).resolved_database_url)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # Ctrl-C once the worker is on it
            with store.read() as conn:
                running = conn.execute(
                    select(inbox_table.c.id).where(inbox_table.c.status == "running")
                ).first()
            if running:
                break
            time.sleep(0.1)
        assert running, "the worker never started the turn"
    finally:
        store.close()
    chat.child.sendintr()
    chat.child.expect("Stopped the reply in progress.")
    chat.child.expect(PROMPT)
    chat.say("/stop", expect="Nothing was running to stop.")
    out = chat.leave()
    assert "(stopped)" in out and "only echo: take your time" not in out


def test_resuming_a_compressed_session_lands_on_the_newest_of_its_lineage(
    term_env: dict[str, str],
) -> None:
    store = open_store(load_settings(term_env).resolved_database_url)
    old, new = "20250101_120000_aaaaaa", "20250101_130000_bbbbbb"
    try:
        with store.write() as conn:
            session_rows.create_session(conn, session_id=old, source="cli", now=1.0, title="trip")
            messages.append_message(conn, old, "user", "plan a trip", now=1.0)
            session_rows.end_session(conn, old, "compression", 2.0)
            session_rows.create_session(
                conn, session_id=new, source="cli", now=2.0, title="trip #2", parent_session_id=old
            )
    finally:
        store.close()
    for ref in (old, "trip"):
        result = run(term_env, "chat", "-q", "where were we?", "-r", ref)
        assert result.returncode == 0, result.stderr
        assert f"session {new}" in result.stderr


def test_two_chats_share_the_stack_and_the_last_one_out_stops_it(
    terminals: list[Terminal], term_env: dict[str, str], hermes_home: Path
) -> None:
    first = start(terminals, term_env).ready()
    second = start(terminals, term_env).ready()
    first.say("from the first", expect="only echo: from the first")
    out = first.leave()
    assert "Starting a local worker" in out and "Stopped the local worker" not in out
    assert (hermes_home / "run" / "redis.sock").exists()  # the second chat still uses it
    second.say("from the second", expect="only echo: from the second")
    out = second.leave()
    assert "Using the hermes stack already running" in out
    assert "Stopped the local worker." in out
    assert not (hermes_home / "run" / "redis.sock").exists()


@pytest.mark.timeout(180)
def test_with_hermes_up_running_the_chat_uses_it(
    term_env: dict[str, str], hermes_home: Path
) -> None:
    up = subprocess.Popen(
        [hermes_bin(), "up", "-w", "1", "-c", "4", "--no-beat"],
        env=term_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status = run(term_env, "status", "--json")
            if status.returncode == 0 and json.loads(status.stdout).get("workers"):
                break
            time.sleep(0.5)
        result = run(term_env, "chat", "-q", "hello up")
        assert result.returncode == 0, result.stderr
        assert result.stdout.endswith("echo: hello up\n")
        assert "Using the hermes stack already running" in result.stderr
        assert "Stopped the local worker" not in result.stderr
        assert (hermes_home / "run" / "redis.sock").exists()  # hermes up's broker lives on
    finally:
        up.send_signal(signal.SIGINT)
        up.communicate(timeout=60)
    assert up.returncode == 0


def test_a_chat_whose_worker_died_says_so_instead_of_waiting_forever(
    terminals: list[Terminal], term_env: dict[str, str], hermes_home: Path
) -> None:
    chat = start(terminals, term_env).ready()
    chat.say("first", expect="echo: first")  # the worker is up and answering
    record = json.loads((hermes_home / "run" / "chat-stack.json").read_text())
    os.kill(record["worker"], signal.SIGKILL)
    chat.child.sendline("second")
    chat.child.expect("the local worker exited", timeout=30)
    chat.child.expect(pexpect.EOF, timeout=30)
    chat.child.close()
    assert chat.child.exitstatus == 1
    assert "chat-worker.log" in chat.text()
    assert not (hermes_home / "run" / "chat-stack.json").exists()  # the rest was stopped
