"""A typing indicator while a turn runs: the real drain and agent (fake OpenAI server streaming
slowly), the real Telegram sender (python-telegram-bot) against the fake Bot API, real Redis."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import pytest

from producers.intake import accept
from shared.db import Store, open_store
from shared.settings import Settings, load_settings
from tests.fakes.delivery import delivery_runtime
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI, Step, running
from tests.fakes.stack import redis_db_url
from tests.fakes.telegram_api import FakeTelegram
from tests.pipeline_helpers import turn
from workers.agent.factory import build_agent
from workers.delivery.discord import DiscordSender
from workers.delivery.telegram import TelegramSender
from workers.drain import drain
from workers.flush import flush

pytestmark = pytest.mark.both_databases

TOKEN = "123456789:AAFakeTokenForTestsSecretPart"
CHAT = "4242"
REPLY = "A reply that takes its time to arrive, piece by piece, over a second or so."


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with running() as server:
        yield server


@pytest.fixture
def bot() -> Iterator[FakeTelegram]:
    with FakeTelegram(TOKEN) as server:
        yield server


@pytest.fixture
def settings(
    hermes_env: dict[str, str], redis_url: str, bot: FakeTelegram, model: FakeOpenAI
) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url),
            "HERMES_PLATFORMS__TELEGRAM__TOKEN": TOKEN,
            "HERMES_PLATFORMS__TELEGRAM__API_BASE": bot.api_base,
            "HERMES_MODEL__BASE_URL": model.url,
            "HERMES_MODEL__API_KEY": "sk-test-not-secret",
            "HERMES_MODEL__NAME": "main-model",
            "HERMES_MODEL__RETRIES": "0",
            "HERMES_AUXILIARY__NAME": "aux-model",
        }
    )


@pytest.fixture
def tg_store(settings: Settings) -> Iterator[Store]:
    store = open_store(settings.resolved_database_url)
    yield store
    store.close()


def test_typing_is_shown_and_refreshed_while_the_turn_runs(
    settings: Settings, tg_store: Store, bot: FakeTelegram, model: FakeOpenAI
) -> None:
    model.script(Step(content=REPLY, chunk_size=6, chunk_delay=0.1))  # ~1.3 s of writing
    agent = build_agent(settings, tg_store)
    with delivery_runtime(settings, tg_store) as (rt, _):
        rt = dataclasses.replace(rt, agent=agent)
        sender = rt.senders.get("telegram")
        assert isinstance(sender, TelegramSender)
        sender.typing_every = 0.25  # Telegram's own pace is 4 s; the test cannot wait that long
        inbound = turn(1, CHAT, platform="telegram", text="hello")
        accepted = accept(tg_store, rt.waker, inbound, settings=settings, clock=time.time)
        started = time.time()
        drain(rt, accepted.session_key)
        answered = time.time()
        while flush(rt, f"telegram:{CHAT}").reason != "idle":
            time.sleep(0.1)
    agent.close()  # type: ignore[attr-defined]

    actions = [c for c in bot.calls if c.method == "sendChatAction"]
    (message,) = [c for c in bot.calls if c.method == "sendMessage"]
    assert message.params["text"] == REPLY
    assert len(actions) >= 3, [c.method for c in bot.calls]  # shown, then refreshed
    assert all(a.params["action"] == "typing" and str(a.params["chat_id"]) == CHAT for a in actions)
    assert all(started <= a.at < message.at <= answered + 5 for a in actions)


def test_a_failing_typing_action_does_not_hold_up_the_reply(
    settings: Settings, tg_store: Store, bot: FakeTelegram, model: FakeOpenAI
) -> None:
    bot.script("sendChatAction", "500")
    model.script(Step(content=REPLY))
    agent = build_agent(settings, tg_store)
    with delivery_runtime(settings, tg_store) as (rt, _):
        rt = dataclasses.replace(rt, agent=agent)
        inbound = turn(1, CHAT, platform="telegram", text="hello")
        accepted = accept(tg_store, rt.waker, inbound, settings=settings, clock=time.time)
        drain(rt, accepted.session_key)
        while flush(rt, f"telegram:{CHAT}").reason != "idle":
            time.sleep(0.1)
    agent.close()  # type: ignore[attr-defined]
    assert [c.params["text"] for c in bot.calls if c.method == "sendMessage"] == [REPLY]


DISCORD_TOKEN = "OTAw.fake-discord-token.SecretPart"
CHANNEL = "1300000000000000042"


def test_discord_typing_is_triggered_while_the_turn_runs(
    hermes_env: dict[str, str], redis_url: str, model: FakeOpenAI
) -> None:
    with FakeDiscord(DISCORD_TOKEN) as discord:
        settings = load_settings(
            {
                **hermes_env,
                "HERMES_BROKER_URL": redis_db_url(redis_url),
                "HERMES_PLATFORMS__DISCORD__TOKEN": DISCORD_TOKEN,
                "HERMES_PLATFORMS__DISCORD__API_BASE": discord.api_base,
                "HERMES_MODEL__BASE_URL": model.url,
                "HERMES_MODEL__API_KEY": "sk-test-not-secret",
                "HERMES_MODEL__NAME": "main-model",
                "HERMES_AUXILIARY__NAME": "aux-model",
            }
        )
        model.script(Step(content=REPLY, chunk_size=6, chunk_delay=0.1))
        store = open_store(settings.resolved_database_url)
        agent = build_agent(settings, store)
        try:
            with delivery_runtime(settings, store) as (rt, _):
                rt = dataclasses.replace(rt, agent=agent)
                sender = rt.senders.get("discord")
                assert isinstance(sender, DiscordSender)
                sender.typing_every = 0.25
                inbound = turn(1, CHANNEL, platform="discord", text="hello")
                accepted = accept(store, rt.waker, inbound, settings=settings, clock=time.time)
                drain(rt, accepted.session_key)
                while flush(rt, f"discord:{CHANNEL}").reason != "idle":
                    time.sleep(0.1)
        finally:
            agent.close()  # type: ignore[attr-defined]
            store.close()
        (message,) = [c for c in discord.calls if c.ok]
        typed = list(discord.typing)
    assert message.body["content"] == REPLY
    assert len(typed) >= 3
    assert all(channel == CHANNEL and at < message.at for channel, at in typed)
