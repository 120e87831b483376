"""Platform mentions of the bot (`@hermes_bot`, Slack `<@U…>`, Discord `<@123>`) are kept in the
transcript but left out of what summarises a session: list and browse previews, auto-titles."""

from __future__ import annotations

import time

import pytest

from producers.intake import accept
from shared.db import Store
from shared.pipeline.route_sessions import route_session_id
from shared.search import SearchRequest, search
from shared.settings import Settings
from shared.store import messages, session_listing
from shared.store import sessions as session_rows
from tests.pipeline_helpers import make_runtime, turn
from workers.drain import drain

SAID = {
    "tg": "@hermes_bot plan the ferry schedule for Friday",
    "slack": "<@U0123ABC> plan the offsite agenda please",
    "slack_named": "<@U0123ABC|hermes> plan the offsite agenda please",
    "discord": "<@123456789> plan the release notes",
    "discord_nick": "hey <@!123456789>, plan the release notes",
}
SHOWN = {
    "tg": "plan the ferry schedule for Friday",
    "slack": "plan the offsite agenda please",
    "slack_named": "plan the offsite agenda please",
    "discord": "plan the release notes",
    "discord_nick": "hey, plan the release notes",
}


@pytest.fixture
def said(store: Store) -> Store:
    with store.write() as conn:
        for n, (sid, text) in enumerate(SAID.items()):
            session_rows.create_session(conn, session_id=sid, source="telegram", now=float(n))
            messages.append_message(conn, sid, "user", text, now=float(n))
    return store


def test_list_previews_leave_mentions_out(said: Store) -> None:
    with said.read() as conn:
        listed, _ = session_listing.list_sessions(conn)
    assert {row.record.id: row.preview for row in listed} == SHOWN


def test_browse_previews_leave_mentions_out(said: Store) -> None:
    browsed = search(said, SearchRequest())
    assert {item["session_id"]: item["preview"] for item in browsed["sessions"]} == SHOWN


def test_the_stored_message_keeps_what_was_said(said: Store) -> None:
    with said.read() as conn:
        assert messages.transcript(conn, "tg")[0].content == SAID["tg"]


@pytest.mark.parametrize("who", ["tg", "slack_named", "discord_nick"])
def test_auto_titles_leave_mentions_out(settings: Settings, store: Store, who: str) -> None:
    rt, _ = make_runtime(settings, store)
    try:
        sent = turn(1, "-100", platform="telegram", chat_type="group", text=SAID[who])
        accepted = accept(store, rt.waker, sent, settings=settings, clock=time.time)
        drain(rt, accepted.session_key)
        with store.read() as conn:
            session_id = route_session_id(conn, accepted.session_key)
            assert session_id is not None
            title = session_rows.require_session(conn, session_id).title
    finally:
        rt.renewer.close()
    assert title is not None
    assert title.lower() == SHOWN[who].removeprefix("hey, ").lower()
