"""Telegram groups through python-telegram-bot against the fake Bot API: only messages addressed
to the bot become turns; the others are acked (the offset moves past them) and not stored. The
bot's username comes from getMe, asked once, and a failed getMe loses nothing."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from sqlalchemy import text

from producers.gateway.deps import Gateway
from producers.telegram.receiver import TelegramPoller, TelegramReceiver
from shared.db import Store
from shared.ports import RecordingWaker
from shared.settings import load_settings
from tests.fakes.background import Background
from tests.fakes.golden import load
from tests.fakes.stack import wait_for
from tests.fakes.telegram_api import FakeTelegram

pytestmark = pytest.mark.both_databases

TOKEN = "123456789:AAFakeTokenForTests"
BOT = {"id": 123456789, "is_bot": True, "first_name": "Fake", "username": "fake_bot"}


def group(number: int, said: str, **extra: Any) -> dict[str, Any]:
    payload, _ = load("telegram", "group")
    data = copy.deepcopy(payload)
    data["update_id"] = number
    message = {k: v for k, v in data["message"].items() if k != "entities"}
    data["message"] = {**message, "message_id": number, "text": said, **extra}
    return dict(data)


def mention(at: int, length: int) -> list[dict[str, Any]]:
    return [{"offset": at, "length": length, "type": "mention"}]


def texts(store: Store) -> list[str]:
    with store.read() as conn:
        return [str(r[0]) for r in conn.execute(text("SELECT text FROM inbox ORDER BY id"))]


@pytest.mark.timeout(60)
def test_only_messages_addressed_to_the_bot_are_turns(
    hermes_env: dict[str, str], store: Store
) -> None:
    updates = [
        group(1, "just chatting among ourselves"),
        group(2, "@fake_bot what is the capital of France?", entities=mention(0, 9)),
        group(3, "@someone_else hi", entities=mention(0, 13)),
        group(4, "/title@other_bot their list"),
        group(5, "/title@fake_bot our list"),
        group(6, "and Spain?", reply_to_message={"message_id": 99, "from": BOT, "date": 0,
                                                "chat": {"id": -4012345678, "type": "group"}}),
        group(7, "/new"),
        group(8, "/weather london"),
        group(9, "ask Fake later", entities=[{"offset": 4, "length": 4, "type": "text_mention",
                                             "user": BOT}]),
    ]  # fmt: skip
    with FakeTelegram(TOKEN) as fake:
        fake.script("getMe", "500")  # the first getMe fails: the update is fetched again
        for item in updates:
            fake.add_update(item)
        settings = load_settings({**hermes_env, "HERMES_PLATFORMS__TELEGRAM__TOKEN": TOKEN})
        gateway = Gateway(settings, store, RecordingWaker(), time.time)
        receiver = TelegramReceiver(gateway, token=TOKEN, secret=None, api_base=fake.api_base)
        poller = TelegramPoller(receiver, token=TOKEN, api_base=fake.api_base, timeout=1)
        with Background(poller.run):
            wait_for(lambda: poller.offset == 10, timeout=30)
        methods = fake.methods()
    assert texts(store) == [
        "what is the capital of France?",
        "/title@fake_bot our list",
        "and Spain?",
        "/new",
        "ask Fake later",
    ]
    assert receiver.username == "fake_bot"
    assert methods.count("getMe") == 2  # one failure, then learnt once for good
    assert "sendMessage" not in methods  # nothing was answered to the others


@pytest.mark.timeout(60)
def test_a_configured_username_needs_no_getme(hermes_env: dict[str, str], store: Store) -> None:
    with FakeTelegram(TOKEN) as fake:
        fake.add_update(group(1, "@Hermes_Bot hello", entities=mention(0, 11)))
        fake.add_update(group(2, "@fake_bot hello", entities=mention(0, 9)))
        settings = load_settings(
            {
                **hermes_env,
                "HERMES_PLATFORMS__TELEGRAM__TOKEN": TOKEN,
                "HERMES_PLATFORMS__TELEGRAM__USERNAME": "@hermes_bot",
            }
        )
        gateway = Gateway(settings, store, RecordingWaker(), time.time)
        conf = settings.platforms.telegram
        receiver = TelegramReceiver(
            gateway, token=TOKEN, secret=None, api_base=fake.api_base, username=conf.username
        )
        poller = TelegramPoller(receiver, token=TOKEN, api_base=fake.api_base, timeout=1)
        with Background(poller.run):
            wait_for(lambda: poller.offset == 3, timeout=30)
        methods = fake.methods()
    assert texts(store) == ["hello"]
    assert "getMe" not in methods
