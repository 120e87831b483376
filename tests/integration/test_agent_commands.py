"""/sessions, /resume and /help through the drain (offline model): who may see which session."""

from __future__ import annotations

import time

import pytest

from producers.intake import accept
from shared.db import Store
from shared.pipeline import outbox
from shared.pipeline.route_sessions import route_session_id
from shared.search import SearchRequest, search
from shared.settings import Settings
from shared.store import session_listing
from shared.store import sessions as session_rows
from shared.store.messages import append_message, transcript
from shared.store.resume import leave_terminal
from tests.pipeline_helpers import make_runtime, turn
from workers.drain import drain
from workers.runtime import Runtime

pytestmark = pytest.mark.both_databases


def say(rt: Runtime, n: int, chat: str, text: str, **extra: object) -> str:
    accepted = accept(
        rt.store, rt.waker, turn(n, chat, text=text, **extra), settings=rt.settings, clock=time.time
    )
    drain(rt, accepted.session_key)
    with rt.store.read() as conn:
        return "\n".join(r.text for r in outbox.for_turn(conn, accepted.turn_id))


def test_resume_switches_the_route_to_the_newest_of_a_lineage_and_reopens_it(
    settings: Settings, store: Store
) -> None:
    rt, _ = make_runtime(settings, store)
    try:
        say(rt, 1, "c1", "/title Garden plans")
        say(rt, 2, "c1", "tomatoes or peppers?")
        say(rt, 3, "c1", "/new")
        say(rt, 5, "c1", "something else entirely")
        listing = say(rt, 6, "c1", "/sessions")
        assert "Garden plans" in listing and "← current" in listing
        answer = say(rt, 7, "c1", "/resume garden plans")
        assert answer.startswith("Resumed session 'Garden plans'")
        with store.read() as conn:
            current = route_session_id(conn, "agent:main:cli:dm:c1")
            assert current is not None
            session = session_rows.require_session(conn, current)
        assert session.title == "Garden plans" and session.ended_at is None  # reopened
        say(rt, 8, "c1", "back to the garden")
        with store.read() as conn:
            assert session_rows.require_session(conn, current).message_count == 4
        assert "already in session" in say(rt, 9, "c1", "/resume Garden plans")
        assert "No session matches" in say(rt, 10, "c1", "/resume no such thing")
        assert "Usage: /resume" in say(rt, 11, "c1", "/resume")
    finally:
        rt.renewer.close()


def test_resume_from_an_untitled_session_keeps_it_and_its_messages(
    settings: Settings, store: Store
) -> None:
    """Only a session that holds nothing is dropped when /resume leaves it (on PostgreSQL,
    before revision 0011 counted messages, every untitled one was taken for empty)."""
    rt, _ = make_runtime(settings, store)
    try:
        say(rt, 1, "c1", "/title Garden plans")
        say(rt, 2, "c1", "tomatoes or peppers?")
        say(rt, 3, "c1", "/new")
        say(rt, 4, "c1", "hi")  # nothing to title it with yet: left untitled
        untitled = _session_of(rt, "c1")
        assert untitled is not None
        resumed = say(rt, 5, "c1", "/resume Garden plans")
        assert resumed.startswith("Resumed session 'Garden plans'") and ": 2 messages," in resumed
        with store.read() as conn:
            kept = session_rows.get_session(conn, untitled)
            said = [m.content for m in transcript(conn, untitled)]
        assert kept is not None and kept.title is None and kept.message_count == 2
        assert said[0] == "hi"
        listing = say(rt, 6, "c1", "/sessions")
        assert f"• (untitled) — {untitled}, 2 messages" in listing
    finally:
        rt.renewer.close()


def test_gateway_users_see_their_own_sessions_and_the_terminal_sees_all(
    settings: Settings, store: Store
) -> None:
    rt, _ = make_runtime(settings, store)
    try:
        say(rt, 1, "alice-dm", "/title Alice secrets", platform="telegram", user_id="alice")
        say(rt, 2, "alice-dm", "my diary", platform="telegram", user_id="alice")
        say(rt, 3, "c1", "/title Terminal notes")
        say(rt, 4, "c1", "terminal work")
        bob = {"platform": "telegram", "user_id": "bob"}
        assert "No session matches" in say(rt, 5, "bob-dm", "/resume Alice secrets", **bob)
        assert "No session matches" in say(rt, 6, "bob-dm", "/resume Terminal notes", **bob)
        assert "No saved sessions" in say(rt, 7, "bob-dm", "/sessions", **bob)
        alice = {"platform": "telegram", "user_id": "alice"}
        assert "Alice secrets" in say(rt, 8, "alice-dm", "/sessions", **alice)
        # The terminal is the owner's: it reaches every session, from every platform.
        assert "Alice secrets" in say(rt, 9, "c1", "/sessions")
        assert say(rt, 10, "c1", "/resume Alice secrets").startswith(
            "Resumed session 'Alice secrets'"
        )
    finally:
        rt.renewer.close()


def test_help_lists_the_agent_commands_and_unknown_commands_point_to_it(
    settings: Settings, store: Store
) -> None:
    rt, _ = make_runtime(settings, store)
    try:
        listed = say(rt, 1, "c1", "/help")
        for command in ("/new", "/title", "/compress", "/resume", "/sessions", "/stop", "/reset"):
            assert command in listed
        assert say(rt, 2, "c1", "/dance") == "Unknown command /dance. Send /help for the list."
    finally:
        rt.renewer.close()


def _session_of(rt: Runtime, chat: str, platform: str = "cli") -> str | None:
    with rt.store.read() as conn:
        return route_session_id(conn, f"agent:main:{platform}:dm:{chat}")


def test_new_with_a_name_an_older_member_of_a_chain_holds_says_so(
    settings: Settings, store: Store
) -> None:
    rt, _ = make_runtime(settings, store)
    try:
        say(rt, 1, "c1", "/title payments-refactor")
        say(rt, 2, "c1", "split the ledger")
        assert "Continuing in session 'payments-refactor #2'" in say(rt, 3, "c1", "/compress")
        current = _session_of(rt, "c1")
        answer = say(rt, 4, "c1", "/new payments-refactor")
        assert "payments-refactor" in answer and "taken" in answer
        assert "Started" not in answer
        assert _session_of(rt, "c1") == current  # still in the same session
        say(rt, 5, "c1", "/new payments-refactor-v2")
        say(rt, 6, "c1", "a fresh start")
        with rt.store.read() as conn:
            started = session_rows.require_session(conn, str(_session_of(rt, "c1")))
        assert started.title == "payments-refactor-v2"
    finally:
        rt.renewer.close()


def test_repeated_new_leaves_no_empty_sessions_behind(settings: Settings, store: Store) -> None:
    rt, _ = make_runtime(settings, store)
    try:
        say(rt, 1, "c1", "something worth keeping")
        for n in range(2, 6):
            assert say(rt, n, "c1", "/new") == "Started a new session."
        say(rt, 6, "c1", "the next conversation")
        with rt.store.read() as conn:
            listed, _ = session_listing.list_sessions(conn)
        assert sorted(row.record.message_count for row in listed) == [2, 2]
        browsed = search(rt.store, SearchRequest())
        assert browsed["count"] == 2
    finally:
        rt.renewer.close()


def test_counts_in_replies_agree_with_their_number(settings: Settings, store: Store) -> None:
    rt, _ = make_runtime(settings, store)
    try:
        with store.write() as conn:
            session_rows.create_session(
                conn, session_id="s-one", source="cli", now=time.time(), title="One thing"
            )
            append_message(conn, "s-one", "user", "a single message", now=time.time())
        assert "1 message," in say(rt, 1, "c1", "/resume One thing")
        assert "1 message," in say(rt, 2, "c1", "/sessions")
        assert "1 messages" not in say(rt, 3, "c1", "/sessions")
    finally:
        rt.renewer.close()


def test_a_turn_sent_before_the_terminal_left_is_answered_in_that_session(
    settings: Settings, store: Store
) -> None:
    rt, _ = make_runtime(settings, store)
    key = "agent:main:cli:dm:c1"
    try:
        say(rt, 1, "c1", "first")
        session_id = _session_of(rt, "c1")
        queued = accept(store, rt.waker, turn(2, "c1", text="still queued"), settings=settings,
                        clock=time.time)  # fmt: skip
        with store.write() as conn:
            assert leave_terminal(conn, key, time.time()) == "ended"
        drain(rt, queued.session_key)
        with store.read() as conn:
            left = session_rows.require_session(conn, str(session_id))
            assert route_session_id(conn, key) == session_id
        assert left.end_reason == "cli_exit" and left.message_count == 4  # and it stays ended
        say(rt, 3, "c1", "from a terminal still on it")  # sent after the end: reopens it
        with store.read() as conn:
            reopened = session_rows.require_session(conn, str(session_id))
        assert reopened.ended_at is None and reopened.message_count == 6
    finally:
        rt.renewer.close()


def test_leaving_a_terminal_that_only_ran_commands_keeps_nothing(
    settings: Settings, store: Store
) -> None:
    rt, _ = make_runtime(settings, store)
    try:
        say(rt, 1, "c1", "/help")
        assert _session_of(rt, "c1") is not None
        with store.write() as conn:
            assert leave_terminal(conn, "agent:main:cli:dm:c1", time.time()) == "dropped"
            assert session_listing.count_sessions(conn) == 0
        tg = {"platform": "telegram", "user_id": "alice"}
        say(rt, 2, "d1", "hello there", **tg)  # a platform's session is not the terminal's
        with store.write() as conn:
            assert leave_terminal(conn, "agent:main:telegram:dm:d1", time.time()) == ""
    finally:
        rt.renewer.close()


def test_resume_reopens_a_session_the_terminal_left(settings: Settings, store: Store) -> None:
    rt, _ = make_runtime(settings, store)
    try:
        say(rt, 1, "c1", "/title Left behind")
        say(rt, 2, "c1", "some words")
        with store.write() as conn:
            leave_terminal(conn, "agent:main:cli:dm:c1", time.time())
        assert say(rt, 3, "c2", "/resume Left behind").startswith("Resumed session")
        with store.read() as conn:
            session = session_rows.require_session(conn, str(_session_of(rt, "c2")))
        assert session.title == "Left behind"
        assert (session.ended_at, session.end_reason) == (None, None)
    finally:
        rt.renewer.close()
