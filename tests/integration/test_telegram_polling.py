"""Telegram long polling against the fake Bot API: nothing pending is dropped at start, and the
offset moves past an update only once it is recorded."""

from __future__ import annotations

import copy
import sqlite3
import time
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from producers.gateway.deps import Gateway
from producers.telegram.receiver import TelegramPoller, TelegramReceiver
from shared.db import Store
from shared.ports import RecordingWaker
from shared.settings import load_settings
from tests.fakes.background import Background
from tests.fakes.golden import load
from tests.fakes.stack import wait_for
from tests.fakes.telegram_api import FakeTelegram

TOKEN = "123456789:AAFakeTokenForTests"


def update(name: str, number: int | None = None, **message: Any) -> dict[str, Any]:
    payload, _ = load("telegram", name)
    data = copy.deepcopy(payload)
    if number is not None:
        data["update_id"] = number
    data.get("message", {}).update(message)
    return dict(data)


def texts(store: Store) -> list[str]:
    with store.read() as conn:
        return [str(r[0]) for r in conn.execute(text("SELECT text FROM inbox ORDER BY id"))]


@pytest.mark.timeout(60)
def test_polling_keeps_pending_updates_and_advances_only_after_recording(
    hermes_env: dict[str, str], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeTelegram(TOKEN) as fake:
        fake.add_update(update("private", 10, text="pending before start"))
        fake.add_update(update("edited_message", 11))
        fake.add_update(update("private", 12, text="second pending", message_id=16))
        settings = load_settings({**hermes_env, "HERMES_PLATFORMS__TELEGRAM__TOKEN": TOKEN})
        gateway = Gateway(settings, store, RecordingWaker(), time.time)
        receiver = TelegramReceiver(gateway, token=TOKEN, secret=None)
        poller = TelegramPoller(receiver, token=TOKEN, api_base=fake.api_base, timeout=1)

        real = gateway.record
        failures = {"left": 2}

        async def flaky(turn: Any) -> Any:
            if turn.text == "second pending" and failures["left"] > 0:
                failures["left"] -= 1
                raise OperationalError(
                    "INSERT INTO inbox …", {}, sqlite3.OperationalError("database is locked")
                )
            return await real(turn)

        monkeypatch.setattr(gateway, "record", flaky)
        with Background(poller.run):
            wait_for(lambda: len(texts(store)) == 2, timeout=30)
            fake.add_update(update("private", 13, text="while running", message_id=17))
            wait_for(lambda: len(texts(store)) == 3, timeout=30)
            wait_for(lambda: poller.offset == 14, timeout=10)
        calls = [c for c in fake.calls if c.method in ("deleteWebhook", "getUpdates")]
    assert texts(store) == ["pending before start", "second pending", "while running"]
    assert calls[0].method == "deleteWebhook"
    assert calls[0].params.get("drop_pending_updates") in (False, "false", None)
    first_poll = calls[1].params
    assert first_poll.get("offset") in (None, 0)
    offsets = [c.params.get("offset") for c in calls[1:]]
    # the failed update (12) was asked for again: the offset never skipped past it
    assert offsets.count(12) >= 2
    assert failures["left"] == 0
