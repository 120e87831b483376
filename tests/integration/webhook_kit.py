"""What the hostile-input and fuzz tests of the webhooks share: one gateway app with Telegram
and Slack configured, on a real state.db, and a look at what it recorded."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import text
from starlette.testclient import TestClient

from producers.gateway.app import create_app
from producers.gateway.deps import Gateway
from shared.db import Store
from shared.ports import RecordingWaker
from shared.settings import Settings, load_settings

TG_TOKEN = "123456789:AAFakeTokenForTests"
TG_SECRET = "s3cret-Token_for-webhook"
SLACK_SECRET = "slack-signing-secret-for-tests"


def webhook_settings(hermes_env: dict[str, str]) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_PLATFORMS__TELEGRAM__TOKEN": TG_TOKEN,
            "HERMES_PLATFORMS__TELEGRAM__WEBHOOK_SECRET": TG_SECRET,
            # the bot's name is known, so no group message needs getMe (no Bot API here)
            "HERMES_PLATFORMS__TELEGRAM__USERNAME": "hermes_bot",
            "HERMES_PLATFORMS__SLACK__TOKEN": "xoxb-1111-2222-bottoken",
            "HERMES_PLATFORMS__SLACK__SIGNING_SECRET": SLACK_SECRET,
        }
    )


@contextmanager
def served(settings: Settings, store: Store) -> Iterator[TestClient]:
    gateway = Gateway(settings, store, RecordingWaker(), time.time)
    with TestClient(create_app(gateway)) as client:
        yield client


def inbox_texts(store: Store) -> list[str]:
    with store.read() as conn:
        return [str(r[0]) for r in conn.execute(text("SELECT text FROM inbox ORDER BY id"))]
