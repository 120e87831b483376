"""A terminal session's life through the real `hermes` script: leaving ends it (so pruning can
remove it), resuming reopens it, `-c` takes what `-r` takes, and names follow parent links."""

from __future__ import annotations

import re

from shared.db import open_store
from shared.model import SessionRecord
from shared.settings import load_settings
from shared.store import messages
from shared.store import sessions as session_rows
from tests.integration.terminal_kit import Terminal, run, start, term_env, terminals

__all__ = ["term_env", "terminals"]  # fixtures

ONE_SHOT_ID = re.compile(r"session (\d{8}_\d{6}_[0-9a-f]{6})")


def _session(env: dict[str, str], session_id: str) -> SessionRecord | None:
    store = open_store(load_settings(env).resolved_database_url)
    try:
        with store.read() as conn:
            return session_rows.get_session(conn, session_id)
    finally:
        store.close()


def _one_shot(env: dict[str, str], text: str, *args: str) -> str:
    done = run(env, "chat", "-q", text, *args)
    assert done.returncode == 0, done.stderr
    return ONE_SHOT_ID.findall(done.stderr)[-1]


def test_leaving_ends_the_session_and_resuming_reopens_it(
    terminals: list[Terminal], term_env: dict[str, str]
) -> None:
    session_id = _one_shot(term_env, "first words")
    left = _session(term_env, session_id)
    assert left is not None and left.ended_at is not None and left.end_reason == "cli_exit"

    chat = start(terminals, term_env, "-c").ready()
    reopened = _session(term_env, session_id)
    assert reopened is not None and (reopened.ended_at, reopened.end_reason) == (None, None)
    chat.say("more words", expect="only echo: more words")
    chat.child.sendline("/exit")
    chat.child.expect("Resume it with")
    chat.child.wait()
    again = _session(term_env, session_id)
    assert again is not None and again.end_reason == "cli_exit"
    assert again.ended_at is not None and left.ended_at is not None
    assert again.ended_at > left.ended_at and again.message_count == 4


def test_an_ended_terminal_session_can_be_pruned(term_env: dict[str, str]) -> None:
    session_id = _one_shot(term_env, "something to forget")
    pruned = run(term_env, "sessions", "prune", "--older-than", "0", "--yes")
    assert pruned.returncode == 0, pruned.stderr
    assert "Deleted 1 session (2 messages)." in pruned.stdout
    assert _session(term_env, session_id) is None


def test_continue_takes_an_id_prefix_like_resume(term_env: dict[str, str]) -> None:
    first = _one_shot(term_env, "the one to come back to")
    _one_shot(term_env, "a later chat")  # the latest terminal session is another one now
    for ref in (first[:18], first):
        again = _one_shot(term_env, "back again", "-c", ref)
        assert again == first
    missing = run(term_env, "-c", "no such session")
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
    assert "no such session" in missing.stderr


def test_continue_by_a_shared_auto_title_resumes_the_first_conversation(
    term_env: dict[str, str],
) -> None:
    """Two unrelated chats that title themselves alike are not one lineage: the second gets
    "… (2)", and the name resumes the conversation that holds it."""
    words = "Zebra Migration Planning Notes"
    first = _one_shot(term_env, words)
    second = _one_shot(term_env, words)
    one, two = _session(term_env, first), _session(term_env, second)
    assert one is not None and two is not None
    assert (one.title, one.title_source) == (words, "auto")
    assert (two.title, two.title_source) == (f"{words} (2)", "auto")
    assert _one_shot(term_env, "which one?", "-c", words) == first
    assert _one_shot(term_env, "this one", "-c", f"{words} (2)") == second
    store = open_store(load_settings(term_env).resolved_database_url)
    try:
        with store.read() as conn:
            said = [m.content for m in messages.transcript(conn, first) if m.role == "user"]
    finally:
        store.close()
    assert said == [words, "which one?"]
