"""`/handoff slack` opens its thread with a seed message (the official slack_sdk against the
fake Web API), `/handoff discord` a thread under the text channel (fake REST); each falls back
to the channel itself when the platform refuses the thread."""

from __future__ import annotations

import time
from collections.abc import Iterator

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

TOKEN = "xoxb-1111-2222-SlackBotTokenSecret"
HOME = chats.HomeChannel("slack", "C1", "channel", None, "U1", "agent:main:slack:channel:T1:C1:U1")


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    with FakeSlack(TOKEN) as server:
        yield server


@pytest.fixture
def sl(hermes_env: dict[str, str], redis_url: str, fake: FakeSlack) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url),
            "HERMES_PLATFORMS__SLACK__TOKEN": TOKEN,
            "HERMES_PLATFORMS__SLACK__API_BASE": fake.api_base,
        }
    )


@pytest.fixture
def sl_store(sl: Settings) -> Iterator[Store]:
    store = open_store(sl.resolved_database_url)
    with store.write() as conn:
        chats.set_home_channel(conn, HOME)
    yield store
    store.close()


def test_slack_handoff_threads_under_a_seed_message(
    sl: Settings, sl_store: Store, fake: FakeSlack
) -> None:
    with delivery_runtime(sl, sl_store) as (rt, waker):
        _say(rt, 1, "plan my trip to Lisbon")
        session_id = _session(rt)
        _say(rt, 2, "/handoff slack")
        assert run_handoff(rt, waker.handoffs[0][0]).outcome == "completed"
        seed, note, summary = fake.sent()
        assert seed["text"] == "🧵 Plan my trip to Lisbon" and not seed.get("thread_ts")
        with sl_store.read() as conn:
            found = handoffs.get(conn, waker.handoffs[0][0])
        assert found is not None and found.thread_id is not None
        ts = found.thread_id
        assert note["thread_ts"] == ts and summary["thread_ts"] == ts
        assert "handed off from the terminal to slack" in summary["text"]
        thread_key = f"agent:main:slack:channel:T1:C1:{ts}"
        assert found.target_key == thread_key and _bound(rt, thread_key) == session_id
        # someone else replying in the thread continues the same session
        other = turn(
            5, "C1", text="and the hotel?", platform="slack", chat_type="channel",
            user_id="U2", scope="T1", thread_id=ts,
        )  # fmt: skip
        accepted = accept(sl_store, rt.waker, other, settings=sl, clock=time.time)
        assert accepted.session_key == thread_key
        drain(rt, accepted.session_key)
    with sl_store.read() as conn:
        answered = inbox.get_turn(conn, accepted.turn_id)
    assert answered is not None and answered.session_id == session_id


def test_slack_handoff_falls_back_to_the_channel_when_the_seed_is_refused(
    sl: Settings, sl_store: Store, fake: FakeSlack
) -> None:
    with delivery_runtime(sl, sl_store) as (rt, waker):
        _say(rt, 1, "plan my trip")
        session_id = _session(rt)
        _say(rt, 2, "/handoff slack")
        fake.script("chat.postMessage", "restricted_action")  # the seed only
        assert run_handoff(rt, waker.handoffs[0][0]).outcome == "completed"
        note, summary = fake.sent()
        assert not note.get("thread_ts") and not summary.get("thread_ts")
        assert note["text"].startswith("↻ Continuing session ")
        assert _bound(rt, HOME.session_key or "") == session_id


DC_TOKEN = "MTAwMDAwMDAwMDAwMDAwMDAx.FakeDiscordToken.Secret"
DC_HOME = chats.HomeChannel(
    "discord", "500", "channel", None, "U1", "agent:main:discord:channel:900:500:U1"
)


@pytest.fixture
def discord_fake() -> Iterator[FakeDiscord]:
    with FakeDiscord(DC_TOKEN) as server:
        server.channels["500"] = text_channel("500", "900")
        yield server


@pytest.fixture
def dc(hermes_env: dict[str, str], redis_url: str, discord_fake: FakeDiscord) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url),
            "HERMES_PLATFORMS__DISCORD__TOKEN": DC_TOKEN,
            "HERMES_PLATFORMS__DISCORD__API_BASE": discord_fake.api_base,
        }
    )


@pytest.fixture
def dc_store(dc: Settings) -> Iterator[Store]:
    store = open_store(dc.resolved_database_url)
    with store.write() as conn:
        chats.set_home_channel(conn, DC_HOME)
    yield store
    store.close()


def test_discord_handoff_opens_a_thread_that_archives_after_a_day(
    dc: Settings, dc_store: Store, discord_fake: FakeDiscord
) -> None:
    with delivery_runtime(dc, dc_store) as (rt, waker):
        _say(rt, 1, "plan my trip to Lisbon")
        session_id = _session(rt)
        _say(rt, 2, "/handoff discord")
        assert run_handoff(rt, waker.handoffs[0][0]).outcome == "completed"
    ((parent, body),) = discord_fake.threads_asked
    assert parent == "500"
    assert body == {"name": "Plan my trip to Lisbon", "type": 11, "auto_archive_duration": 1440}
    with dc_store.read() as conn:
        found = handoffs.get(conn, waker.handoffs[0][0])
    assert found is not None and found.thread_id is not None
    note, summary = discord_fake.sent(found.thread_id)
    assert note["content"].startswith("↻ Continuing session ")
    assert "handed off from the terminal to discord" in summary["content"]
    assert discord_fake.sent("500") == []
    assert _bound(rt, f"agent:main:discord:channel:900:500:{found.thread_id}") == session_id


def test_discord_handoff_without_thread_permission_uses_the_channel(
    dc: Settings, dc_store: Store, discord_fake: FakeDiscord
) -> None:
    discord_fake.no_threads.add("500")
    with delivery_runtime(dc, dc_store) as (rt, waker):
        _say(rt, 1, "plan my trip")
        session_id = _session(rt)
        _say(rt, 2, "/handoff discord")
        assert run_handoff(rt, waker.handoffs[0][0]).outcome == "completed"
    assert len(discord_fake.threads_asked) == 1
    note, _summary = discord_fake.sent("500")
    assert note["content"].startswith("↻ Continuing session ")
    assert _bound(rt, DC_HOME.session_key or "") == session_id
