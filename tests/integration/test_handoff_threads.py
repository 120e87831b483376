"""`/handoff slack` opens its thread with a seed message (the official slack_sdk against the
fake Web API), `/handoff discord` a thread under the text channel (fake REST); in the thread a
second user continues the same session. Each falls back to the channel itself when the platform
refuses the thread, and there too anyone in the channel continues the session."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from producers.intake import accept
from shared.db import Store, open_store
from shared.pipeline import inbox
from shared.settings import Settings, load_settings
from shared.store import chats, handoffs
from tests.fakes.delivery import delivery_runtime
from tests.fakes.discord_api import FakeDiscord, text_channel
from tests.fakes.slack_api import FakeSlack
from tests.fakes.stack import redis_db_url
from tests.integration.test_handoff import _bound, _say, _session
from tests.pipeline_helpers import turn
from workers.drain import drain
from workers.handoff import run_handoff
from workers.runtime import Runtime

pytestmark = pytest.mark.both_databases

SLACK_TOKEN = "xoxb-1111-2222-SlackBotTokenSecret"
DISCORD_TOKEN = "MTAwMDAwMDAwMDAwMDAwMDAx.FakeDiscordToken.Secret"


@dataclass
class Case:
    """One platform's home channel behind its fake API, and what the tests read back."""

    platform: str
    fake: Any
    home: chats.HomeChannel
    scope: str
    settings: Settings | None = None
    store: Store | None = None

    @property
    def room(self) -> str:  # the channel's key shared by everyone in it
        return f"agent:main:{self.platform}:channel:{self.scope}:{self.home.chat_id}"

    def refuse_threads(self) -> None:
        if self.platform == "slack":
            self.fake.script("chat.postMessage", "restricted_action")  # the seed only
        else:
            self.fake.no_threads.add(self.home.chat_id)

    def sent(self, place: str | None) -> list[str]:
        """Texts delivered in the thread `place` (Slack: under that ts; Discord: that thread
        channel), or in the channel itself when None."""
        if self.platform == "slack":
            return [m["text"] for m in self.fake.sent() if m.get("thread_ts") == place]
        return [m["content"] for m in self.fake.sent(place or self.home.chat_id)]


@pytest.fixture(params=["slack", "discord"])
def case(
    request: pytest.FixtureRequest, hermes_env: dict[str, str], redis_url: str
) -> Iterator[Case]:
    if request.param == "slack":
        fake: Any = FakeSlack(SLACK_TOKEN)
        home = chats.HomeChannel(
            "slack", "C1", "channel", None, "U1", "agent:main:slack:channel:T1:C1:U1"
        )
        found = Case("slack", fake, home, "T1")
        token = SLACK_TOKEN
    else:
        fake = FakeDiscord(DISCORD_TOKEN)
        fake.channels["500"] = text_channel("500", "900")
        home = chats.HomeChannel(
            "discord", "500", "channel", None, "U1", "agent:main:discord:channel:900:500:U1"
        )
        found = Case("discord", fake, home, "900")
        token = DISCORD_TOKEN
    with fake:
        prefix = f"HERMES_PLATFORMS__{request.param.upper()}__"
        found.settings = load_settings(
            {
                **hermes_env,
                "HERMES_BROKER_URL": redis_db_url(redis_url),
                prefix + "TOKEN": token,
                prefix + "API_BASE": fake.api_base,
            }
        )
        found.store = open_store(found.settings.resolved_database_url)
        with found.store.write() as conn:
            chats.set_home_channel(conn, home)
        try:
            yield found
        finally:
            found.store.close()


def _another_user_says(rt: Runtime, case: Case, thread_id: str | None) -> tuple[str, str | None]:
    """U2 writes in the thread (or the channel); the key it took and the session it answered."""
    other = turn(
        5, case.home.chat_id, text="and the hotel?", platform=case.platform,
        chat_type="channel", user_id="U2", scope=case.scope, thread_id=thread_id,
    )  # fmt: skip
    accepted = accept(rt.store, rt.waker, other, settings=rt.settings, clock=time.time)
    drain(rt, accepted.session_key)
    with rt.store.read() as conn:
        answered = inbox.get_turn(conn, accepted.turn_id)
    return accepted.session_key, answered.session_id if answered is not None else None


def test_handoff_opens_a_thread_that_a_second_user_continues(case: Case) -> None:
    assert case.settings is not None and case.store is not None
    with delivery_runtime(case.settings, case.store) as (rt, waker):
        _say(rt, 1, "plan my trip to Lisbon")
        session_id = _session(rt)
        _say(rt, 2, f"/handoff {case.platform}")
        assert run_handoff(rt, waker.handoffs[0][0]).outcome == "completed"
        with case.store.read() as conn:
            found = handoffs.get(conn, waker.handoffs[0][0])
        assert found is not None and found.thread_id is not None
        thread = found.thread_id
        if case.platform == "slack":  # the seed message's ts anchors the thread
            assert case.sent(None) == ["🧵 Plan my trip to Lisbon"]
        else:  # a public thread under the channel, archived after a day of silence
            ((parent, body),) = case.fake.threads_asked
            assert parent == "500"
            assert body == {
                "name": "Plan my trip to Lisbon",
                "type": 11,
                "auto_archive_duration": 1440,
            }
            assert case.sent(None) == []
        note, summary = case.sent(thread)
        assert note.startswith("↻ Continuing session ")
        assert f"handed off from the terminal to {case.platform}" in summary
        thread_key = f"{case.room}:{thread}"
        assert found.target_key == thread_key and _bound(rt, thread_key) == session_id
        # someone else replying in the thread continues the same session
        assert _another_user_says(rt, case, thread) == (thread_key, session_id)


def test_a_refused_thread_falls_back_to_the_channel_that_anyone_continues(case: Case) -> None:
    assert case.settings is not None and case.store is not None
    case.refuse_threads()
    with delivery_runtime(case.settings, case.store) as (rt, waker):
        _say(rt, 1, "plan my trip")
        session_id = _session(rt)
        _say(rt, 2, f"/handoff {case.platform}")
        assert run_handoff(rt, waker.handoffs[0][0]).outcome == "completed"
        note, summary = case.sent(None)
        assert note.startswith("↻ Continuing session ")
        assert f"handed off from the terminal to {case.platform}" in summary
        assert _bound(rt, case.room) == session_id
        assert _another_user_says(rt, case, None) == (case.room, session_id)
