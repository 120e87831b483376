"""session_search limited to what the asker may reach, on a real state.db: every call shape,
through the engine (`Viewer`) and through the agent tool (`workers.agent.tools.session_search`).
On the terminal the owner reaches every session; a platform user their own on that platform."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.db import Store
from shared.pipeline.inbox import TurnRow
from shared.search import SearchRequest, search
from shared.search.tool import run as tool_run
from shared.store.messages import append_message
from shared.store.sessions import create_session
from shared.store.visibility import Viewer
from workers.agent.tools import session_search
from workers.agent.tools.registry import ToolContext

pytestmark = pytest.mark.both_databases

TELEGRAM_U1 = Viewer("telegram", "u1")
TERMINAL = Viewer("cli", "local")


class People:
    """Sessions of several people on several platforms, newest written last."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.clock = 1_700_000_000.0
        self.ids: dict[str, list[int]] = {}

    def session(
        self, sid: str, source: str, user: str | None, texts: list[str], title: str | None = None
    ) -> list[int]:
        with self.store.write() as conn:
            create_session(
                conn, session_id=sid, source=source, now=self.clock, user_id=user, title=title
            )
            for i, text in enumerate(texts):
                self.clock += 1
                role = ("user", "assistant")[i % 2]
                self.ids.setdefault(sid, []).append(
                    append_message(conn, sid, role, text, now=self.clock)
                )
        return self.ids[sid]


@pytest.fixture
def people(store: Store) -> People:
    out = People(store)
    out.session("tg_u1_a", "telegram", "u1", ["the walrus plan", "ok"], title="u1 walrus")
    out.session("tg_u2_a", "telegram", "u2", ["the walrus plan too", "ok"], title="u2 walrus")
    out.session("cli_a", "cli", None, ["walrus from the terminal", "ok"], title="cli walrus")
    out.session("sl_u1_a", "slack", "u1", ["walrus on slack", "ok"])
    out.session("tg_u1_b", "telegram", "u1", ["second thing", "ok"])
    return out


def agent_call(
    store: Store, platform: str, user: str | None, current: str = "live", **args: Any
) -> dict[str, Any]:
    """The agent's tool as the registry calls it, for a turn of `user` on `platform`."""
    turn = TurnRow(
        id=1, platform=platform, event_id="e1", session_key="k", seq=1, kind="message",
        chat_id="c1", chat_type="dm", text="hi", status="running", attempts=1, received_at=0.0,
        user_id=user,
    )  # fmt: skip
    ctx = ToolContext(store=store, session_id=current, turn=turn, owner="o", clock=lambda: 0.0)
    result: dict[str, Any] = session_search.run(ctx, args)
    json.dumps(result)
    return result


def listed(result: dict[str, Any]) -> list[str]:
    return sorted(s["session_id"] for s in result.get("results", result.get("sessions", [])))


# --- browse ---


def test_browse_shows_a_telegram_user_only_their_telegram_sessions(
    store: Store, people: People
) -> None:
    result = agent_call(store, "telegram", "u1")
    assert listed(result) == ["tg_u1_a", "tg_u1_b"]
    assert result["count"] == 2 and result["more"] is False
    assert listed(agent_call(store, "telegram", "u2")) == ["tg_u2_a"]
    assert listed(agent_call(store, "slack", "u1")) == ["sl_u1_a"]


def test_the_terminal_owner_browses_every_session_of_every_platform(
    store: Store, people: People
) -> None:
    everything = ["cli_a", "sl_u1_a", "tg_u1_a", "tg_u1_b", "tg_u2_a"]
    assert listed(agent_call(store, "cli", "local")) == everything
    assert listed(tool_run(store, {}, None, TERMINAL)) == everything


def test_a_platform_turn_without_a_user_sees_nothing(store: Store, people: People) -> None:
    assert agent_call(store, "telegram", None)["count"] == 0
    assert agent_call(store, "telegram", None, query="walrus")["count"] == 0


def test_browse_fills_its_limit_with_visible_sessions(store: Store, people: People) -> None:
    for i in range(12):
        people.session(f"tg_u2_{i:02}", "telegram", "u2", ["newer chatter", "ok"])
    result = agent_call(store, "telegram", "u1", limit=2)
    assert listed(result) == ["tg_u1_a", "tg_u1_b"]


# --- discover ---


def test_discover_finds_only_the_askers_sessions(store: Store, people: People) -> None:
    assert listed(agent_call(store, "telegram", "u1", query="walrus", limit=10)) == ["tg_u1_a"]
    everyone = ["cli_a", "sl_u1_a", "tg_u1_a", "tg_u2_a"]
    assert listed(agent_call(store, "cli", "local", query="walrus", limit=10)) == everyone
    engine = search(store, SearchRequest(query="walrus", limit=10, viewer=TELEGRAM_U1))
    assert listed(engine) == ["tg_u1_a"]
    operator = search(store, SearchRequest(query="walrus", limit=10))  # `hermes sessions search`
    assert listed(operator) == everyone


@pytest.mark.parametrize("sort", ["newest", "relevance"])
def test_discover_limit_counts_visible_sessions_only(
    store: Store, people: People, sort: str
) -> None:
    # Other people's sessions are newer and match better; the asker's one must still come back.
    for i in range(15):
        people.session(f"tg_u2_{i:02}", "telegram", "u2", ["walrus walrus walrus", "walrus"])
        people.session(f"cli_{i:02}", "cli", None, ["walrus walrus walrus", "walrus"])
    result = agent_call(store, "telegram", "u1", query="walrus", limit=1, sort=sort)
    assert listed(result) == ["tg_u1_a"] and result["count"] == 1
    result = agent_call(store, "telegram", "u1", query="walrus", limit=3, sort=sort)
    assert listed(result) == ["tg_u1_a"]


def test_discover_with_nothing_visible_says_so(store: Store, people: People) -> None:
    result = agent_call(store, "telegram", "u1", query="terminal")
    assert result["count"] == 0 and result["results"] == [] and result["note"]


def test_agent_tool_leaves_out_the_current_session_that_holds_the_term(
    store: Store, people: People
) -> None:
    people.session("tg_u1_live", "telegram", "u1", ["walrus again, like before", "ok"])
    result = agent_call(store, "telegram", "u1", current="tg_u1_live", query="walrus", limit=10)
    assert listed(result) == ["tg_u1_a"]
    only_here = agent_call(store, "telegram", "u1", current="tg_u1_live", query="again")
    assert only_here["count"] == 0 and only_here["note"]
    assert "tg_u1_live" not in listed(agent_call(store, "telegram", "u1", current="tg_u1_live"))


# --- read and scroll ---


def test_read_and_scroll_refuse_sessions_the_asker_may_not_see(
    store: Store, people: People
) -> None:
    assert agent_call(store, "telegram", "u1", session_id="tg_u1_a")["session_id"] == "tg_u1_a"
    assert "error" in agent_call(store, "telegram", "u1", session_id="tg_u2_a")
    assert "error" in agent_call(store, "telegram", "u1", session_id="u2 walrus")  # by title
    assert agent_call(store, "cli", "local", session_id="u2 walrus")["session_id"] == "tg_u2_a"
    assert agent_call(store, "telegram", "u1", session_id="u1 walrus")["session_id"] == "tg_u1_a"
    other = people.ids["tg_u2_a"][0]
    refused = agent_call(store, "telegram", "u1", session_id="tg_u2_a", around_message_id=other)
    assert "error" in refused and "walrus" not in json.dumps(refused)
    mine = people.ids["tg_u1_a"][1]
    scrolled = agent_call(store, "telegram", "u1", session_id="tg_u1_a", around_message_id=mine)
    assert scrolled["mode"] == "scroll" and scrolled["session_id"] == "tg_u1_a"
    engine = search(store, SearchRequest(session_id="tg_u2_a", viewer=TELEGRAM_U1))
    assert "not found" in engine["error"]


def test_an_id_prefix_resolves_among_visible_sessions_only(store: Store, people: People) -> None:
    people.session("20240101_aaaa01", "telegram", "u1", ["one", "ok"])
    people.session("20240101_aaaa02", "telegram", "u2", ["two", "ok"])
    people.session("20240101_aaaa03", "telegram", "u1", ["three", "ok"])
    ambiguous = agent_call(store, "telegram", "u1", session_id="20240101_aaaa")
    assert "20240101_aaaa01" in ambiguous["error"] and "20240101_aaaa03" in ambiguous["error"]
    assert "20240101_aaaa02" not in ambiguous["error"] and "2 sessions" in ambiguous["error"]
    unique = agent_call(store, "telegram", "u2", session_id="20240101_aaaa")
    assert unique["session_id"] == "20240101_aaaa02"
    everywhere = agent_call(store, "cli", "local", session_id="20240101_aaaa")["error"]
    assert "3 sessions" in everywhere
    theirs = people.ids["tg_u2_a"][0]
    scrolled = agent_call(store, "cli", "local", session_id="tg_u2_a", around_message_id=theirs)
    assert scrolled["mode"] == "scroll" and scrolled["messages"][0]["content"].endswith("too")
