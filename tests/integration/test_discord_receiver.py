"""The Discord receiver against a fake gateway: DMs, guild channels and threads recorded in order,
chatter and bots ignored, one refusal for a user not on the allow-list."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from producers.discord.receiver import DiscordReceiver
from producers.gateway.deps import Gateway
from shared.db import Store
from shared.ports import RecordingWaker
from shared.settings import Settings, load_settings
from tests.fakes.background import Background
from tests.fakes.discord_api import FakeDiscord, text_channel, thread_channel
from tests.fakes.golden import load
from tests.fakes.stack import wait_for

TOKEN = "OTAw.fake-discord-token.for-tests"


def inbox(store: Store) -> list[tuple[str, str, str]]:
    with store.read() as conn:
        rows = conn.execute(text("SELECT event_id, session_key, text FROM inbox ORDER BY id"))
        return [(r[0], r[1], r[2]) for r in rows]


def dispatch(fake: FakeDiscord, name: str, **changes: Any) -> dict[str, Any]:
    case, _ = load("discord", name)
    data = {**case["dispatch"]["d"], **changes}
    fake.dispatch("MESSAGE_CREATE", data)
    return data


@pytest.fixture
def fake() -> Iterator[FakeDiscord]:
    with FakeDiscord(TOKEN) as server:
        server.channels["500000000000000001"] = text_channel(
            "500000000000000001", "700000000000000001"
        )
        server.channels["510000000000000001"] = thread_channel(
            "510000000000000001", "500000000000000001", "700000000000000001"
        )
        yield server


def _settings(env: dict[str, str], fake: FakeDiscord, **extra: str) -> Settings:
    return load_settings(
        {
            **env,
            "HERMES_PLATFORMS__DISCORD__TOKEN": TOKEN,
            "HERMES_PLATFORMS__DISCORD__API_BASE": fake.api_base,
            **extra,
        }
    )


@pytest.mark.timeout(60)
def test_messages_are_recorded_in_order_and_chatter_is_not(
    hermes_env: dict[str, str], store: Store, fake: FakeDiscord
) -> None:
    settings = _settings(hermes_env, fake)
    waker = RecordingWaker()
    receiver = DiscordReceiver(
        Gateway(settings, store, waker, time.time), token=TOKEN, api_base=fake.api_base
    )
    with Background(receiver.run):
        assert fake.identified.wait(15)
        dispatch(fake, "dm")
        dispatch(fake, "guild_chatter")
        dispatch(fake, "own_message")
        dispatch(fake, "guild_channel")
        dispatch(fake, "thread")
        for n in range(5):  # a burst in one DM keeps its order
            dispatch(fake, "dm", id=f"13300000000000000{n:02d}", content=f"burst {n}")
        wait_for(lambda: receiver.recorded >= 8, timeout=20)
    rows = inbox(store)
    assert [r[2] for r in rows] == [
        "hey, can you help me plan a trip?",
        "what's the weather in Oslo?",
        "and for Bergen?",
        *[f"burst {n}" for n in range(5)],
    ]
    assert (
        rows[2][1]
        == "agent:main:discord:channel:700000000000000001:500000000000000001:510000000000000001"
    )
    # One wake-up per session: the burst's later turns find the first one still on its way.
    assert sorted(key for key, _ in waker.drains) == sorted({row[1] for row in rows})


@pytest.mark.timeout(60)
def test_a_refused_user_gets_one_reply_and_nothing_is_stored(
    hermes_env: dict[str, str], store: Store, fake: FakeDiscord
) -> None:
    settings = _settings(hermes_env, fake, HERMES_PLATFORMS__DISCORD__ALLOWED_USERS="42")
    receiver = DiscordReceiver(
        Gateway(settings, store, RecordingWaker(), time.time), token=TOKEN, api_base=fake.api_base
    )
    with Background(receiver.run):
        assert fake.identified.wait(15)
        dispatch(fake, "guild_channel")
        dispatch(fake, "guild_channel", id="1320000000000000102")
        wait_for(lambda: fake.sent(), timeout=20)
        time.sleep(0.5)
    assert inbox(store) == []
    assert [m["content"] for m in fake.sent()] == ["Sorry, this assistant is private."]


def test_frames_that_are_not_messages_are_dropped_quietly(
    hermes_env: dict[str, str], store: Store
) -> None:
    settings = load_settings({**hermes_env, "HERMES_PLATFORMS__DISCORD__TOKEN": TOKEN})
    receiver = DiscordReceiver(
        Gateway(settings, store, RecordingWaker(), time.time), token=TOKEN, api_base="http://x"
    )
    for frame in (
        b"\x78\x9c",
        "not json",
        '{"t": "MESSAGE_CREATE", "d": "x"}',
        '{"t": "TYPING_START", "d": {}}',
        '{"t": "MESSAGE_CREATE" oops',
    ):
        receiver.feed(frame)
    assert receiver._queue.empty()
    receiver.feed('{"op": 0, "t": "MESSAGE_CREATE", "s": 3, "d": {"id": "1"}}')
    assert receiver._queue.qsize() == 1
