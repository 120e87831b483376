"""/sessions, /resume and /help through the drain (offline model): who may see which session."""

from __future__ import annotations

import time

from producers.intake import accept
from shared.settings import Settings
from shared.store import Store, outbox
from shared.store import sessions as session_rows
from shared.store.resume import route_session_id
from tests.pipeline_helpers import make_runtime, turn
from workers.drain import drain
from workers.runtime import Runtime


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


def test_gateway_users_only_see_their_own_sessions(settings: Settings, store: Store) -> None:
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
        # The terminal sees terminal sessions only.
        assert "No session matches" in say(rt, 9, "c1", "/resume Alice secrets")
        assert "Alice secrets" not in say(rt, 10, "c1", "/sessions")
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
